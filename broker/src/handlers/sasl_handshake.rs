//! SaslHandshake when it reaches a handler: on a listener without SASL, or on a
//! connection already authenticated whose client cannot re-authenticate (it never
//! sent SaslAuthenticate v1+) or re-authenticated less than a second ago. Kafka answers ILLEGAL_SASL_STATE; the exchange
//! itself runs on the connection, before any handler (`net::sasl`).

use std::rc::Rc;

use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use crate::errors;
use crate::security::context::RequestContext;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 1);

pub async fn handle(
    _shard: &Rc<Shard>,
    _ctx: &RequestContext,
    _version: i16,
    _req: SaslHandshakeRequest,
) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(errors::ILLEGAL_SASL_STATE)
}
