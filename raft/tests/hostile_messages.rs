//! Bytes from a peer never panic the decoder: random buffers, and valid messages cut
//! short or with bytes flipped, decode to a message or to a typed error.
//!
//! What decoding cannot catch: raft-rs itself treats some well-formed but impossible
//! messages as fatal (a heartbeat whose commit index is past the follower's log end
//! panics in `RaftLog::commit_to`). A correct leader never sends one; the transport
//! will CRC-check frames and authenticate peers, and must not step a message from an
//! unknown or unauthenticated node.

use keel_raft::MultiRaft;
use keel_raft::{Entry, Message, MessageType};
use rand::{Rng, SeedableRng};

fn valid_message() -> Vec<u8> {
    use protobuf::Message as _;
    let mut m = Message::default();
    m.set_msg_type(MessageType::MsgAppend);
    m.to = 2;
    m.from = 1;
    m.term = 7;
    m.index = 41;
    m.log_term = 6;
    m.commit = 40;
    let e = Entry { term: 7, index: 42, data: vec![0xab; 300].into(), ..Default::default() };
    m.entries = vec![e].into();
    m.write_to_bytes().expect("a message encodes")
}

#[test]
fn random_and_damaged_bytes_decode_or_fail_cleanly() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b65656c);
    let valid = valid_message();
    let decoded = MultiRaft::decode_message(&valid).expect("a valid message decodes");
    assert_eq!((decoded.index, decoded.entries.len()), (41, 1));
    let (mut ok, mut refused) = (0, 0);
    for round in 0..20_000 {
        let bytes: Vec<u8> = match round % 3 {
            0 => (0..rng.gen_range(0..512)).map(|_| rng.gen()).collect(),
            1 => valid[..rng.gen_range(0..valid.len())].to_vec(),
            _ => {
                let mut b = valid.clone();
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..b.len());
                    b[i] = rng.gen();
                }
                b
            }
        };
        match MultiRaft::decode_message(&bytes) {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(refused > 1_000, "damaged input was refused ({refused} of 20,000)");
    assert!(ok > 0, "some damaged input still decodes ({ok}), so the step path must check it too");
}
