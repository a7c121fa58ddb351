//! AlterClientQuotas: sets and removes client quotas in the cluster metadata, checked
//! as Kafka's controller checks them (entity types and their combination, known keys,
//! whole numbers for byte rates) and applied in one commit. Needs ALTER_CONFIGS on the
//! cluster.

use std::rc::Rc;

use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use crate::cluster::controller::{self, QuotaAlteration};
use crate::cluster::requests::AlterClientQuotas;
use crate::errors;
use crate::quota::{self, Entity};
use crate::security::acl;
use crate::security::context::RequestContext;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 1);

/// Relayed to the controller (see `handlers::run`) when the principal may do all it
/// asks: ALTER_CONFIGS on the cluster.
pub fn relayed(shard: &Shard, ctx: &RequestContext, _req: &AlterClientQuotasRequest) -> bool {
    super::cluster_allowed(shard, ctx, crate::security::acl::operation::ALTER_CONFIGS)
}

/// One entry of the request: its entity as asked (echoed back), and the change or the
/// refusal (code, message).
type Checked = (Vec<EntityData>, Result<QuotaAlteration, controller::Failure>);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let authorized = super::cluster_authorized(shard, ctx, acl::operation::ALTER_CONFIGS);
    let mut checked: Vec<Checked> = Vec::new();
    for entry in &req.entries {
        let echo = entry
            .entity
            .iter()
            .map(|e| {
                EntityData::default().with_entity_type(e.entity_type.clone()).with_entity_name(e.entity_name.clone())
            })
            .collect();
        let outcome = if authorized {
            check(&checked, entry)
        } else {
            Err((errors::CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.".into()))
        };
        checked.push((echo, outcome));
    }
    let changes: Vec<QuotaAlteration> = checked.iter().filter_map(|(_, c)| c.as_ref().ok().cloned()).collect();
    let committed = if changes.is_empty() || req.validate_only {
        Ok(())
    } else {
        shard.call(0, AlterClientQuotas { alterations: changes }).await
    };
    let entries = checked
        .into_iter()
        .map(|(entity, outcome)| {
            let (code, message) = match outcome.map(|_| ()).and(committed.clone()) {
                Ok(()) => (errors::NONE, None),
                Err((code, message)) => (code, Some(str_bytes(&message))),
            };
            EntryData::default().with_entity(entity).with_error_code(code).with_error_message(message)
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// Checks one entry against Kafka's rules; `earlier` are the entries before it (an
/// entity named again is refused).
fn check(
    earlier: &[Checked],
    entry: &kafka_protocol::messages::alter_client_quotas_request::EntryData,
) -> Result<QuotaAlteration, controller::Failure> {
    let invalid = |m: String| (errors::INVALID_REQUEST, m);
    let entity = Entity::from_parts(entry.entity.iter().map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())))
        .map_err(invalid)?;
    let mut ops: Vec<(String, Option<f64>)> = Vec::new();
    let mut duplicate = false;
    for op in &entry.ops {
        duplicate |= ops.iter().any(|(k, _)| k.as_str() == op.key.as_str());
        ops.push((op.key.to_string(), (!op.remove).then_some(op.value)));
    }
    let seen = earlier.iter().any(|(_, c)| c.as_ref().is_ok_and(|(e, _)| *e == entity));
    if duplicate || seen {
        return Err(invalid(format!("Ignoring duplicate entity {}", describe(&entity))));
    }
    quota::validate(&entity, &ops).map_err(invalid)?;
    Ok((entity, ops))
}

/// An entity as Kafka's ClientQuotaEntity prints it.
fn describe(entity: &Entity) -> String {
    let parts: Vec<String> = entity.parts().iter().map(|(t, n)| format!("{t}={}", n.unwrap_or("null"))).collect();
    format!("ClientQuotaEntity(entries={{{}}})", parts.join(", "))
}
