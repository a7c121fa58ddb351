//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's brokers speak them:
//! the server side of the exchange, and the stored credential (salt, iterations,
//! StoredKey, ServerKey). The password itself is never stored, and neither is the
//! salted password: AlterUserScramCredentials carries the salted password (the client
//! salts it), from which the keys are derived and kept.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};

/// Kafka's bounds on a credential's iterations.
pub const ITERATIONS_MIN: i32 = 4096;
pub const ITERATIONS_MAX: i32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        match name {
            "SCRAM-SHA-256" => Some(Mechanism::Sha256),
            "SCRAM-SHA-512" => Some(Mechanism::Sha512),
            _ => None,
        }
    }

    /// The mechanism's number in Describe/AlterUserScramCredentials.
    pub fn from_type(t: i8) -> Option<Mechanism> {
        match t {
            1 => Some(Mechanism::Sha256),
            2 => Some(Mechanism::Sha512),
            _ => None,
        }
    }

    pub fn type_number(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha512 => {
                let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// Hi(password, salt, iterations) of RFC 5802: PBKDF2 with the mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Mechanism::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

/// What a broker keeps of a SCRAM user's password, per mechanism (base64 in the
/// metadata, as Kafka writes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub salt: String,
    pub stored_key: String,
    pub server_key: String,
    pub iterations: i32,
}

impl Credential {
    /// The credential for a salted password, as AlterUserScramCredentials gives it.
    pub fn from_salted(mechanism: Mechanism, salt: &[u8], salted_password: &[u8], iterations: i32) -> Credential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        let server_key = mechanism.hmac(salted_password, b"Server Key");
        Credential {
            salt: B64.encode(salt),
            stored_key: B64.encode(mechanism.hash(&client_key)),
            server_key: B64.encode(server_key),
            iterations,
        }
    }

    /// The credential for a password (the bootstrap users of the configuration).
    pub fn from_password(mechanism: Mechanism, password: &str, iterations: i32) -> Credential {
        let salt: [u8; 16] = rand::random();
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations as u32);
        Credential::from_salted(mechanism, &salt, &salted, iterations)
    }
}

/// Where an exchange stands after a client message.
pub enum Step {
    /// Send this challenge and wait for the client's next message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send the final server message.
    Done { user: String, server_final: Vec<u8> },
    /// Refused, for the log (the client gets Kafka's generic message).
    Failed { user: String, reason: String },
}

/// The server side of one SCRAM exchange.
pub struct ScramServer {
    mechanism: Mechanism,
    state: State,
}

enum State {
    ClientFirst,
    ClientFinal {
        user: String,
        client_first_bare: String,
        server_first: String,
        gs2_header: String,
        nonce: String,
        credential: Credential,
    },
    Finished,
}

impl ScramServer {
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer { mechanism, state: State::ClientFirst }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Takes the client's next message; `lookup` finds a user's credential.
    pub fn step(&mut self, message: &[u8], lookup: impl Fn(&str) -> Option<Credential>) -> Step {
        let state = std::mem::replace(&mut self.state, State::Finished);
        let Ok(message) = std::str::from_utf8(message) else {
            return fail("", "the message is not UTF-8");
        };
        match state {
            State::ClientFirst => self.client_first(message, lookup),
            State::ClientFinal { user, client_first_bare, server_first, gs2_header, nonce, credential } => {
                let auth = Exchange { client_first_bare, server_first, gs2_header, nonce };
                self.client_final(message, user, &auth, &credential)
            }
            State::Finished => fail("", "the exchange is already over"),
        }
    }

    fn client_first(&mut self, message: &str, lookup: impl Fn(&str) -> Option<Credential>) -> Step {
        // gs2-header: "n,," or "y,," or "n,a=authzid,"; channel binding ("p=") is not offered.
        let mut parts = message.splitn(3, ',');
        let (Some(binding), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next()) else {
            return fail("", "a malformed client-first message");
        };
        if binding != "n" && binding != "y" {
            return fail("", "channel binding is not supported");
        }
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", v)) => user = unescape_user(v),
                Some(("r", v)) => client_nonce = Some(v.to_string()),
                Some(("m", _)) => return fail("", "mandatory extensions are not supported"),
                // Kafka's "tokenauth" and other extensions: delegation tokens are not served.
                Some(("tokenauth", "true")) => return fail("", "delegation tokens are not supported"),
                _ => {}
            }
        }
        let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
            return fail("", "a client-first message without a user name or nonce");
        };
        if client_nonce.is_empty() || client_nonce.contains(',') {
            return fail(&user, "a bad client nonce");
        }
        if let Some(a) = authzid.strip_prefix("a=") {
            if unescape_user(a).as_deref() != Some(user.as_str()) {
                return fail(&user, "an authorization id different from the user name");
            }
        } else if !authzid.is_empty() {
            return fail(&user, "a malformed authorization id");
        }
        let Some(credential) = lookup(&user) else {
            return fail(&user, "unknown user");
        };
        let nonce = format!("{client_nonce}{}", server_nonce());
        let server_first = format!("r={nonce},s={},i={}", credential.salt, credential.iterations);
        let gs2_header = format!("{binding},{authzid},");
        self.state = State::ClientFinal {
            user,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            gs2_header,
            nonce,
            credential,
        };
        Step::Continue(server_first.into_bytes())
    }

    fn client_final(&mut self, message: &str, user: String, ex: &Exchange, credential: &Credential) -> Step {
        let Some((without_proof, proof)) = message.rsplit_once(",p=") else {
            return fail(&user, "a client-final message without a proof");
        };
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("c", v)) => binding = Some(v),
                Some(("r", v)) => nonce = Some(v),
                _ => {}
            }
        }
        if binding.and_then(|b| B64.decode(b).ok()).as_deref() != Some(ex.gs2_header.as_bytes()) {
            return fail(&user, "the channel binding does not match the gs2 header");
        }
        if nonce != Some(ex.nonce.as_str()) {
            return fail(&user, "the nonce does not match");
        }
        let (Ok(proof), Ok(stored_key), Ok(server_key)) =
            (B64.decode(proof), B64.decode(&credential.stored_key), B64.decode(&credential.server_key))
        else {
            return fail(&user, "a proof or stored key that is not base64");
        };
        let auth_message = format!("{},{},{}", ex.client_first_bare, ex.server_first, without_proof);
        let client_signature = self.mechanism.hmac(&stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return fail(&user, "a proof of the wrong length");
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        let computed = self.mechanism.hash(&client_key);
        if !constant_time_eq(&computed, &stored_key) {
            return fail(&user, "invalid credentials");
        }
        let server_signature = self.mechanism.hmac(&server_key, auth_message.as_bytes());
        Step::Done { user, server_final: format!("v={}", B64.encode(server_signature)).into_bytes() }
    }
}

struct Exchange {
    client_first_bare: String,
    server_first: String,
    gs2_header: String,
    nonce: String,
}

fn fail(user: &str, reason: &str) -> Step {
    Step::Failed { user: user.to_string(), reason: reason.to_string() }
}

/// RFC 5802 saslname: "=2C" is ',' and "=3D" is '='; any other '=' is malformed.
fn unescape_user(v: &str) -> Option<String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    (!out.is_empty()).then_some(out)
}

fn server_nonce() -> String {
    use rand::distributions::{Alphanumeric, DistString};
    Alphanumeric.sample_string(&mut rand::thread_rng(), 32)
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The client's final message for `password`, given its first message (without the
/// gs2 header) and the server's first message: the client side of the exchange, for
/// tests and tools. `None` if the server's message is malformed.
pub fn client_final_message(
    mechanism: Mechanism,
    password: &str,
    client_first_bare: &str,
    server_first: &str,
) -> Option<String> {
    let attrs: std::collections::HashMap<&str, &str> =
        server_first.split(',').filter_map(|a| a.split_once('=')).collect();
    let salt = B64.decode(attrs.get("s")?).ok()?;
    let iterations: u32 = attrs.get("i")?.parse().ok()?;
    let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
    let client_key = mechanism.hmac(&salted, b"Client Key");
    let stored_key = mechanism.hash(&client_key);
    let without_proof = format!("c=biws,r={}", attrs.get("r")?);
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = mechanism.hmac(&stored_key, auth.as_bytes());
    let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
    Some(format!("{without_proof},p={}", B64.encode(proof)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_succeeds_with_the_password_and_fails_without() {
        for mech in [Mechanism::Sha256, Mechanism::Sha512] {
            let cred = Credential::from_password(mech, "s3cret", ITERATIONS_MIN);
            for (password, ok) in [("s3cret", true), ("wrong", false)] {
                let mut server = ScramServer::new(mech);
                let bare = "n=alice,r=clientnonce";
                let Step::Continue(first) =
                    server.step(format!("n,,{bare}").as_bytes(), |u| (u == "alice").then(|| cred.clone()))
                else {
                    panic!("the first step continues")
                };
                let first = String::from_utf8(first).unwrap();
                assert!(first.starts_with("r=clientnonce"));
                let fin = client_final_message(mech, password, bare, &first).unwrap();
                match server.step(fin.as_bytes(), |_| None) {
                    Step::Done { user, server_final } => {
                        assert!(ok);
                        assert_eq!(user, "alice");
                        assert!(server_final.starts_with(b"v="));
                    }
                    Step::Failed { .. } => assert!(!ok),
                    Step::Continue(_) => panic!("no third step"),
                }
            }
            let mut server = ScramServer::new(mech);
            assert!(matches!(server.step(b"n,,n=bob,r=x", |_| None), Step::Failed { .. }));
            assert!(matches!(ScramServer::new(mech).step(b"garbage", |_| None), Step::Failed { .. }));
        }
        assert_eq!(unescape_user("a=2Cb=3D").as_deref(), Some("a,b="));
        assert_eq!(unescape_user("a=b"), None);
    }
}
