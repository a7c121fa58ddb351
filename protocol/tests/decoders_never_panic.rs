//! Seeded random and mutated inputs for every decoder of network input: frame
//! headers, request bodies of every API, and record batches. None may panic; each
//! either decodes or returns an error. The seed is printed so a failure can be replayed.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{encode_request_header_into_buffer, Encodable, StrBytes};
use keel_protocol::batch::{self, build_batch};
use keel_protocol::frame::decode_request;
use rand::{Rng, RngCore, SeedableRng};

const ROUNDS: usize = 20_000;

// The same allocator as the broker binary: element counts off the wire can ask for
// hundreds of gigabytes before a decoder notices the bytes are missing.
#[global_allocator]
static ALLOCATOR: keel_protocol::alloc::GuardedAllocator = keel_protocol::alloc::GuardedAllocator;

fn seed() -> u64 {
    std::env::var("KEEL_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_cafe)
}

fn valid_frames() -> Vec<Bytes> {
    fn frame<R: Encodable>(key: ApiKey, version: i16, body: &R) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("fuzz")));
        let mut buf = BytesMut::new();
        encode_request_header_into_buffer(&mut buf, &header).unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }
    let records = build_batch(0, 1, &[(Some(b"k"), Some(b"v"))]);
    let produce =
        ProduceRequest::default().with_acks(-1).with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_records(Some(records))])]);
    let fetch = FetchRequest::default().with_topics(vec![fetch_request::FetchTopic::default()
        .with_topic(TopicName(StrBytes::from_static_str("t")))
        .with_partitions(vec![fetch_request::FetchPartition::default()])]);
    vec![
        frame(ApiKey::Produce, 9, &produce),
        frame(ApiKey::Produce, 12, &produce),
        frame(ApiKey::Fetch, 12, &fetch),
        frame(ApiKey::Metadata, 12, &MetadataRequest::default()),
        frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
        frame(ApiKey::CreateTopics, 7, &CreateTopicsRequest::default()),
        frame(ApiKey::ListOffsets, 8, &ListOffsetsRequest::default()),
    ]
}

#[test]
fn mutated_requests_decode_or_fail_cleanly() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed());
    eprintln!("seed {}", seed());
    let frames = valid_frames();
    for _ in 0..ROUNDS {
        let mut f = frames[rng.gen_range(0..frames.len())].to_vec();
        match rng.gen_range(0..4) {
            0 => {
                let cut = rng.gen_range(0..=f.len());
                f.truncate(cut);
            }
            1 => {
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..f.len());
                    f[i] = rng.gen();
                }
            }
            2 => {
                let i = rng.gen_range(0..f.len());
                f[i..].iter_mut().for_each(|b| *b = 0xff);
            }
            _ => {
                let n = rng.gen_range(0..64);
                let mut junk = vec![0u8; n];
                rng.fill_bytes(&mut junk);
                f.extend_from_slice(&junk);
            }
        }
        let _ = decode_request(Bytes::from(f));
    }
}

#[test]
fn random_bytes_as_requests_and_batches() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ 1);
    for _ in 0..ROUNDS {
        let mut junk = vec![0u8; rng.gen_range(0..256)];
        rng.fill_bytes(&mut junk);
        let junk = Bytes::from(junk);
        let _ = decode_request(junk.clone());
        let _ = batch::split_and_validate(&junk);
        let _ = batch::BatchHeader::parse(&junk);
    }
}

#[test]
fn mutated_batches_never_validate_with_a_wrong_crc() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed() ^ 2);
    let good = build_batch(0, 1, &[(Some(b"key"), Some(b"value")), (None, Some(b"second"))]);
    for _ in 0..ROUNDS {
        let mut b = good.to_vec();
        let i = rng.gen_range(21..b.len());
        let flip: u8 = rng.gen_range(1..=255);
        b[i] ^= flip;
        assert!(batch::validate(&b).is_err(), "a flipped byte at {i} passed CRC validation");
        let _ = batch::split_and_validate(&Bytes::from(b));
    }
}
