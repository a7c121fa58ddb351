//! SaslAuthenticate when it reaches a handler: on a listener without SASL, or on a
//! connection already authenticated that is not re-authenticating (KIP-368
//! re-authentication runs on the connection, `net::sasl`).
//! The exchange itself runs on the connection, before any handler (`net::sasl`).

use std::rc::Rc;

use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};

use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 2);

pub async fn handle(
    _shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    _req: SaslAuthenticateRequest,
) -> SaslAuthenticateResponse {
    let message = if ctx.session.protocol().uses_sasl() {
        "SaslAuthenticate request received after successful authentication"
    } else {
        "Unexpected SaslAuthenticate request on a listener without SASL"
    };
    SaslAuthenticateResponse::default()
        .with_error_code(errors::ILLEGAL_SASL_STATE)
        .with_error_message(Some(str_bytes(message)))
}
