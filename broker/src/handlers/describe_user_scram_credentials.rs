//! DescribeUserScramCredentials (KIP-554): the SCRAM mechanisms and iterations of each
//! user (never the keys), from the cluster metadata and the configuration's users.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse};

use crate::errors;
use crate::security::context::RequestContext;
use crate::security::scram::Mechanism;
use crate::shard::Shard;
use crate::util::str_bytes;

pub const VERSIONS: (i16, i16) = (0, 0);

pub async fn handle(
    shard: &Rc<Shard>,
    ctx: &RequestContext,
    _version: i16,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // As Kafka: DESCRIBE on the cluster.
    if !super::cluster_authorized(shard, ctx, crate::security::acl::operation::DESCRIBE) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(Some(crate::util::str_bytes("Cluster authorization failed.")));
    }
    let known = credentials(shard);
    let result = |user: &str, code: i16, message: Option<String>, infos: Vec<CredentialInfo>| {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(user))
            .with_error_code(code)
            .with_error_message(message.map(|m| str_bytes(&m)))
            .with_credential_infos(infos)
    };
    let infos = |m: &BTreeMap<Mechanism, i32>| {
        m.iter()
            .map(|(mech, i)| CredentialInfo::default().with_mechanism(mech.type_number()).with_iterations(*i))
            .collect()
    };
    let results = match req.users.filter(|u| !u.is_empty()) {
        None => known.iter().map(|(user, m)| result(user, errors::NONE, None, infos(m))).collect(),
        Some(users) => {
            let names: Vec<String> = users.iter().map(|u| u.name.to_string()).collect();
            names
                .iter()
                .map(|name| {
                    if names.iter().filter(|n| *n == name).count() > 1 {
                        let message = format!(
                            "Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
                        );
                        return result(name, errors::DUPLICATE_RESOURCE, Some(message), Vec::new());
                    }
                    match known.get(name) {
                        Some(m) => result(name, errors::NONE, None, infos(m)),
                        None => {
                            let message = format!("Attempt to describe a user credential that does not exist: {name}");
                            result(name, errors::RESOURCE_NOT_FOUND, Some(message), Vec::new())
                        }
                    }
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// Every SCRAM user with the iterations of each of its mechanisms.
fn credentials(shard: &Shard) -> BTreeMap<String, BTreeMap<Mechanism, i32>> {
    let meta = shard.meta();
    let mut out: BTreeMap<String, BTreeMap<Mechanism, i32>> = BTreeMap::new();
    for (user, mechanism, iterations) in shard.security.bootstrap_scram_users() {
        out.entry(user.to_string()).or_default().insert(mechanism, iterations);
    }
    for (user, by_mechanism) in &meta.scram_users {
        for (name, credential) in by_mechanism {
            if let Some(m) = Mechanism::parse(name) {
                out.entry(user.clone()).or_default().insert(m, credential.iterations);
            }
        }
    }
    out
}
