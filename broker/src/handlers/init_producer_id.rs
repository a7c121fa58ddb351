//! InitProducerId for idempotent producers: a fresh producer id from the controller, or
//! the same id with a bumped epoch when a producer asks to reset its sequences
//! (KIP-360). Transactional ids are refused until transactions exist.

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::cluster::controller;
use crate::errors;
use crate::shard::Shard;

pub const VERSIONS: (i16, i16) = (0, 5);

pub async fn handle(shard: &Rc<Shard>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    if req.transactional_id.is_some() {
        return resp.with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
        return resp.with_producer_id(req.producer_id).with_producer_epoch(req.producer_epoch + 1);
    }
    match shard.submit_to(0, |s| async move { controller::allocate_producer_id(s).await }).await {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err((code, _)) => resp.with_error_code(code),
    }
}
