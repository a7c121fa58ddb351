//! The request versions the tester may send: those both brokers advertise in ApiVersions
//! and kafka-protocol can encode.
//!
//! Sending only shared versions keeps the comparison about behaviour: a version one
//! broker does not serve is a difference ApiVersions already tells clients about.

use std::collections::HashMap;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseKind};

use crate::client::Client;

/// Produce versions below 3 predate record batch v2 (and Kafka 4 removed them).
const PRODUCE_VERSION_MIN: i16 = 3;

pub struct Versions {
    common: HashMap<i16, (i16, i16)>,
}

impl Versions {
    pub fn negotiate(kafka: &mut Client, keel: &mut Client) -> Result<Versions, String> {
        let kafka_ranges = advertised(kafka, "kafka")?;
        let keel_ranges = advertised(keel, "keel")?;
        let mut common = HashMap::new();
        for (&api, &(kafka_min, kafka_max)) in &kafka_ranges {
            let Some(&(keel_min, keel_max)) = keel_ranges.get(&api) else { continue };
            let Ok(key) = ApiKey::try_from(api) else { continue };
            let library = key.valid_versions();
            let mut min = kafka_min.max(keel_min).max(library.min);
            let max = kafka_max.min(keel_max).min(library.max);
            if key == ApiKey::Produce {
                min = min.max(PRODUCE_VERSION_MIN);
            }
            if min <= max {
                common.insert(api, (min, max));
            }
        }
        Ok(Versions { common })
    }

    pub fn common(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.common.get(&(api as i16)).copied()
    }
}

/// ApiVersions v0 (which every broker answers) for the ranges a broker serves.
fn advertised(client: &mut Client, broker: &str) -> Result<HashMap<i16, (i16, i16)>, String> {
    let request = RequestKind::ApiVersions(ApiVersionsRequest::default());
    let answer = client.send(ApiKey::ApiVersions, 0, &request, true);
    let description = format!("{answer:?}");
    match answer.into_response() {
        Some(ResponseKind::ApiVersions(r)) if r.error_code == 0 => {
            Ok(r.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect())
        }
        _ => Err(format!("{broker}: ApiVersions failed: {description}")),
    }
}
