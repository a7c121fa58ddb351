//! SASL/OAUTHBEARER (RFC 7628) as Kafka's `OAuthBearerSaslServer` serves it: the
//! client's first message carries a bearer token (a JWT), which is validated here;
//! a rejected token is answered with an error challenge (`{"status":"invalid_token"}`),
//! the client answers `\x01`, and the exchange fails with SASL_AUTHENTICATION_FAILED
//! whose message is that challenge.
//!
//! Two validators, as Kafka's two server callback handlers:
//! - unsecured JWTs (`{"alg":"none"}`, no signature), Kafka's default
//!   `OAuthBearerUnsecuredValidatorCallbackHandler`: for tests and development only,
//!   accepted by default only when no JWKS is configured;
//! - signed JWTs (RS256/384/512, ES256/384) checked against the keys of a JWKS, as
//!   `OAuthBearerValidatorCallbackHandler`: a file (`sasl_oauthbearer_jwks_file`, or a
//!   `file:` JWKS URL), read at start, or an `https:` endpoint kept fresh off the shards
//!   by [`super::jwks_endpoint`]; with the expected issuer and audiences. Signatures are
//!   checked with ring, which the TLS listeners already build on, rather than a JWT
//!   crate bringing a second crypto stack.
//!
//! Each SASL listener has its own settings (`listener_sasl_oauthbearer`, see
//! [`crate::config::listener_sasl`]). The validator is pure: the time comes in as an argument,
//! so tests pin it, and a token naming a key id the JWKS lacks comes back as a
//! [`Rejection`] with `unknown_kid`, for the caller to ask for a refresh.

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};

use super::jwks_endpoint::{is_https, SharedJwks};

pub const OAUTHBEARER: &str = "OAUTHBEARER";

/// What the broker's configuration says about bearer tokens.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    /// Claim holding the principal name (Kafka's `sub` by default).
    pub sub_claim: String,
    /// Claim holding the token's scopes (a space-separated string or an array).
    pub scope_claim: String,
    /// Scopes every token must hold (Kafka's `unsecuredValidatorRequiredScope`).
    pub required_scopes: Vec<String>,
    /// Allowed clock difference with the token's issuer.
    pub clock_skew_ms: i64,
    pub allow_unsecured: bool,
    pub jwks: Option<Rc<SharedJwks>>,
    pub expected_issuer: Option<String>,
    /// A signed token must name one of these in `aud` (if any is given).
    pub expected_audience: Vec<String>,
}

impl OAuthSettings {
    /// The settings of `config`; an `https:` JWKS takes the shard's copy in `endpoints`
    /// (by URL), or an empty set where there is none (the check before the shards start).
    pub fn new(
        config: &crate::config::BrokerConfig,
        endpoints: &BTreeMap<String, Rc<SharedJwks>>,
    ) -> Result<OAuthSettings, String> {
        let jwks = match (&config.sasl_oauthbearer_jwks_file, &config.sasl_oauthbearer_jwks_endpoint_url) {
            (Some(_), Some(_)) => {
                return Err("give one of sasl_oauthbearer_jwks_file and sasl_oauthbearer_jwks_endpoint_url".into())
            }
            (Some(path), None) => Some(SharedJwks::fixed(Jwks::load(path)?)),
            (None, Some(url)) if is_https(url) => {
                Some(endpoints.get(url).cloned().unwrap_or_else(|| SharedJwks::fixed(Jwks::default())))
            }
            (None, Some(url)) => {
                let path = url.strip_prefix("file://").or_else(|| url.strip_prefix("file:")).ok_or_else(|| {
                    format!("sasl_oauthbearer_jwks_endpoint_url {url:?}: expected an https: or a file: URL")
                })?;
                Some(SharedJwks::fixed(Jwks::load(Path::new(path))?))
            }
            (None, None) => None,
        };
        // Kafka's defaults: no skew for unsecured tokens, 30 s for signed ones.
        let default_skew = if jwks.is_some() { 30_000 } else { 0 };
        Ok(OAuthSettings {
            sub_claim: config.sasl_oauthbearer_sub_claim_name.clone(),
            scope_claim: config.sasl_oauthbearer_scope_claim_name.clone(),
            required_scopes: config.sasl_oauthbearer_required_scopes.clone(),
            clock_skew_ms: config.sasl_oauthbearer_clock_skew_ms.unwrap_or(default_skew) as i64,
            allow_unsecured: config.sasl_oauthbearer_allow_unsecured.unwrap_or(jwks.is_none()),
            jwks,
            expected_issuer: config.sasl_oauthbearer_expected_issuer.clone(),
            expected_audience: config.sasl_oauthbearer_expected_audience.clone(),
        })
    }
}

/// A validated token.
#[derive(Debug, Clone, PartialEq)]
pub struct BearerToken {
    pub principal: String,
    /// Milliseconds since the epoch (`exp` × 1000): the session's end (KIP-368).
    pub expires_at_ms: i64,
}

/// Why a token was refused. The status goes to the client; the reason only to the log,
/// as Kafka keeps it in its debug log.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// `invalid_token`, or `insufficient_scope` with the missing scope.
    pub scope: Option<String>,
    pub reason: String,
    /// The token named this key id and the JWKS has no key of it: a refresh may find it.
    pub unknown_kid: Option<String>,
}

impl Rejection {
    fn invalid(reason: impl Into<String>) -> Rejection {
        Rejection { scope: None, reason: reason.into(), unknown_kid: None }
    }

    /// The error challenge Kafka's `OAuthBearerSaslServer.jsonErrorResponse` sends.
    pub fn challenge(&self) -> String {
        match &self.scope {
            None => r#"{"status":"invalid_token"}"#.to_string(),
            Some(scope) => format!(r#"{{"status":"insufficient_scope", "scope":"{scope}"}}"#),
        }
    }
}

/// The client's first message: `n,[a=authzid],\x01auth=Bearer TOKEN\x01[k=v\x01]*\x01`.
#[derive(Debug, PartialEq)]
pub struct ClientFirst {
    pub authzid: String,
    pub token: String,
    pub extensions: BTreeMap<String, String>,
}

/// Kafka's message for a first message it cannot parse.
pub const INVALID_FIRST_MESSAGE: &str = "Invalid OAUTHBEARER client first message";

/// Parses the client's first message as `OAuthBearerClientInitialResponse` does.
pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst, String> {
    let text = std::str::from_utf8(message).map_err(|_| INVALID_FIRST_MESSAGE.to_string())?;
    let rest = text.strip_prefix("n,").ok_or(INVALID_FIRST_MESSAGE)?;
    let (gs2_authzid, rest) = rest.split_once(',').ok_or(INVALID_FIRST_MESSAGE)?;
    let authzid = match gs2_authzid {
        "" => String::new(),
        a => a.strip_prefix("a=").filter(|a| !a.is_empty()).ok_or(INVALID_FIRST_MESSAGE)?.to_string(),
    };
    let pairs = rest.strip_prefix('\x01').and_then(|r| r.strip_suffix("\x01\x01")).ok_or(INVALID_FIRST_MESSAGE)?;
    let mut auth = None;
    let mut extensions = BTreeMap::new();
    for pair in pairs.split('\x01') {
        let (key, value) = pair.split_once('=').ok_or(INVALID_FIRST_MESSAGE)?;
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(INVALID_FIRST_MESSAGE.into());
        }
        if key == "auth" {
            auth = Some(value);
        } else if !value.bytes().all(|b| matches!(b, 0x21..=0x7E | b' ' | b'\t' | b'\r' | b'\n')) {
            return Err(format!("Extension value ({value}) for extension {key} is invalid"));
        } else {
            extensions.insert(key.to_string(), value.to_string());
        }
    }
    let auth = auth.ok_or("Invalid OAUTHBEARER client first message: 'auth' not specified")?;
    let (scheme, token) = auth
        .split_once(' ')
        .map(|(s, t)| (s, t.trim_start_matches(' ')))
        .filter(|(s, t)| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        })
        .ok_or("Invalid OAUTHBEARER client first message: invalid 'auth' format")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(format!("Invalid scheme in OAUTHBEARER client first message: {scheme}"));
    }
    Ok(ClientFirst { authzid, token: token.to_string(), extensions })
}

/// Validates a compact JWS at `now_ms` (milliseconds since the epoch).
pub fn validate(settings: &OAuthSettings, token: &str, now_ms: i64) -> Result<BearerToken, Rejection> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header_b64, claims_b64, signature_b64] = parts[..] else {
        return Err(Rejection::invalid("a JWS compact serialization has 3 dot-separated Base64URL values"));
    };
    let header = json_object(header_b64, "header")?;
    let claims = json_object(claims_b64, "claims")?;
    let alg = header.get("alg").and_then(Value::as_str).ok_or_else(|| Rejection::invalid("no alg in the header"))?;
    if alg == "none" {
        if !settings.allow_unsecured {
            return Err(Rejection::invalid("unsecured tokens (alg none) are not accepted"));
        }
        if !signature_b64.is_empty() {
            return Err(Rejection::invalid("an unsecured JWS must not carry a signature"));
        }
    } else {
        let jwks = settings.jwks.as_ref().map(|j| j.keys()).ok_or_else(|| {
            Rejection::invalid(format!(
                "a signed token (alg {alg}) needs a JWKS (sasl_oauthbearer_jwks_endpoint_url or _jwks_file)"
            ))
        })?;
        let signature = decode(signature_b64).ok_or_else(|| Rejection::invalid("the signature is not Base64URL"))?;
        let kid = header.get("kid").and_then(Value::as_str);
        let signed = &token[..header_b64.len() + 1 + claims_b64.len()];
        jwks.verify(alg, kid, signed.as_bytes(), &signature)?;
        check_issuer_and_audience(settings, &claims)?;
    }
    check_claims(settings, &claims, now_ms)
}

fn check_claims(settings: &OAuthSettings, claims: &Map<String, Value>, now_ms: i64) -> Result<BearerToken, Rejection> {
    let skew = settings.clock_skew_ms;
    let principal = match claims.get(&settings.sub_claim) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(Rejection::invalid("the principal claim is empty")),
        Some(_) => return Err(Rejection::invalid(format!("claim {} is not a string", settings.sub_claim))),
        None => return Err(Rejection::invalid(format!("required claim {} is missing", settings.sub_claim))),
    };
    let time = |name: &str| -> Result<Option<i64>, Rejection> {
        match claims.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                n.as_f64().map(|s| Some((s * 1000.0) as i64)).ok_or_else(|| Rejection::invalid(format!("bad {name}")))
            }
            Some(_) => Err(Rejection::invalid(format!("claim {name} is not a number"))),
        }
    };
    let issued_at = time("iat")?;
    let expires_at = time("exp")?.ok_or_else(|| Rejection::invalid("required claim exp is missing"))?;
    if let Some(iat) = issued_at {
        if iat > now_ms + skew {
            return Err(Rejection::invalid(format!("the Issued At value ({iat} ms) is in the future")));
        }
        if expires_at <= iat {
            return Err(Rejection::invalid("the Expiration Time is not after the Issued At time"));
        }
    }
    if now_ms - skew >= expires_at {
        return Err(Rejection::invalid(format!("the token expired at {expires_at} ms")));
    }
    if let Some(nbf) = time("nbf")? {
        if nbf > now_ms + skew {
            return Err(Rejection::invalid("the token is not valid yet (nbf)"));
        }
    }
    let scopes: Vec<&str> = match claims.get(&settings.scope_claim) {
        Some(Value::String(s)) => s.split(' ').filter(|s| !s.is_empty()).collect(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if let Some(missing) = settings.required_scopes.iter().find(|s| !scopes.contains(&s.as_str())) {
        return Err(Rejection {
            scope: Some(settings.required_scopes.join(" ")),
            reason: format!("the token's scope lacks {missing}"),
            unknown_kid: None,
        });
    }
    Ok(BearerToken { principal, expires_at_ms: expires_at })
}

fn check_issuer_and_audience(settings: &OAuthSettings, claims: &Map<String, Value>) -> Result<(), Rejection> {
    if let Some(issuer) = &settings.expected_issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
            return Err(Rejection::invalid(format!("the issuer is not {issuer}")));
        }
    }
    if !settings.expected_audience.is_empty() {
        let audience: Vec<&str> = match claims.get("aud") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !audience.iter().any(|a| settings.expected_audience.iter().any(|e| e == a)) {
            return Err(Rejection::invalid("the audience is not one expected"));
        }
    }
    Ok(())
}

/// Base64URL with or without padding, as Java's URL decoder takes it.
fn decode(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

fn json_object(part: &str, what: &str) -> Result<Map<String, Value>, Rejection> {
    let bytes = decode(part).ok_or_else(|| Rejection::invalid(format!("the {what} is not Base64URL")))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(Rejection::invalid(format!("the {what} is not a JSON object"))),
    }
}

/// One public key of a JWKS.
#[derive(Debug, Clone)]
enum PublicKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`04 || x || y`) and its curve.
    Ec {
        point: Vec<u8>,
        curve: &'static str,
    },
}

#[derive(Debug, Clone)]
struct Jwk {
    kid: Option<String>,
    alg: Option<String>,
    key: PublicKey,
}

/// The keys of a JWKS file (RFC 7517), read at startup.
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    keys: Vec<Jwk>,
}

impl Jwks {
    pub fn load(path: &Path) -> Result<Jwks, String> {
        let text = std::fs::read(path).map_err(|e| format!("reading the JWKS {}: {e}", path.display()))?;
        Jwks::parse(&text).map_err(|e| format!("JWKS {}: {e}", path.display()))
    }

    /// Parses a JWKS; keys of other types (`oct`, unknown curves) are skipped.
    pub fn parse(text: &[u8]) -> Result<Jwks, String> {
        let doc: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
        let keys = doc.get("keys").and_then(Value::as_array).ok_or("no \"keys\" array")?;
        let mut out = Vec::new();
        for key in keys {
            let field = |name: &str| key.get(name).and_then(Value::as_str).and_then(decode);
            let parsed = match (key.get("kty").and_then(Value::as_str), key.get("crv").and_then(Value::as_str)) {
                (Some("RSA"), _) => field("n").zip(field("e")).map(|(n, e)| PublicKey::Rsa { n, e }),
                (Some("EC"), Some(crv @ ("P-256" | "P-384"))) => field("x").zip(field("y")).map(|(x, y)| {
                    let point = [&[4u8][..], &x, &y].concat();
                    PublicKey::Ec { point, curve: if crv == "P-256" { "P-256" } else { "P-384" } }
                }),
                _ => None,
            };
            if let Some(key_material) = parsed {
                out.push(Jwk {
                    kid: key.get("kid").and_then(Value::as_str).map(String::from),
                    alg: key.get("alg").and_then(Value::as_str).map(String::from),
                    key: key_material,
                });
            }
        }
        if out.is_empty() {
            return Err("no RSA or EC (P-256, P-384) key".into());
        }
        Ok(Jwks { keys: out })
    }

    /// Whether a key of the set is named `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }

    /// Checks `signature` of `signed` with the key named `kid` (or, without a kid, any
    /// key that fits the algorithm).
    fn verify(&self, alg: &str, kid: Option<&str>, signed: &[u8], signature: &[u8]) -> Result<(), Rejection> {
        use ring::signature as sig;
        let candidates = self.keys.iter().filter(|k| kid.is_none() || k.kid.as_deref() == kid);
        let candidates = candidates.filter(|k| k.alg.as_deref().is_none_or(|a| a == alg));
        let mut any = false;
        for jwk in candidates {
            let ok = match (&jwk.key, alg) {
                (PublicKey::Rsa { n, e }, "RS256" | "RS384" | "RS512") => {
                    let params = match alg {
                        "RS256" => &sig::RSA_PKCS1_2048_8192_SHA256,
                        "RS384" => &sig::RSA_PKCS1_2048_8192_SHA384,
                        _ => &sig::RSA_PKCS1_2048_8192_SHA512,
                    };
                    sig::RsaPublicKeyComponents { n, e }.verify(params, signed, signature).is_ok()
                }
                (PublicKey::Ec { point, curve: "P-256" }, "ES256") => {
                    sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point).verify(signed, signature).is_ok()
                }
                (PublicKey::Ec { point, curve: "P-384" }, "ES384") => {
                    sig::UnparsedPublicKey::new(&sig::ECDSA_P384_SHA384_FIXED, point).verify(signed, signature).is_ok()
                }
                _ => continue,
            };
            any = true;
            if ok {
                return Ok(());
            }
        }
        let mut rejection = Rejection::invalid(if any {
            format!("the {alg} signature does not match the JWKS key")
        } else {
            format!("no JWKS key for alg {alg} and kid {kid:?}")
        });
        rejection.unknown_kid = kid.filter(|k| !self.has_kid(k)).map(String::from);
        Err(rejection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    const NOW_MS: i64 = 1_800_000_000_000;

    fn settings() -> OAuthSettings {
        OAuthSettings {
            sub_claim: "sub".into(),
            scope_claim: "scope".into(),
            required_scopes: Vec::new(),
            clock_skew_ms: 0,
            allow_unsecured: true,
            jwks: None,
            expected_issuer: None,
            expected_audience: Vec::new(),
        }
    }

    fn enc(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn unsecured(claims: &str) -> String {
        format!("{}.{}.", enc(r#"{"alg":"none"}"#), enc(claims))
    }

    #[test]
    fn client_first_message_as_rfc_7628() {
        let first = parse_client_first(b"n,,\x01auth=Bearer abc.def.\x01\x01").unwrap();
        assert_eq!((first.authzid.as_str(), first.token.as_str()), ("", "abc.def."));
        let first = parse_client_first(b"n,a=alice,\x01auth=bearer t\x01traceId=7 x\x01\x01").unwrap();
        assert_eq!(first.authzid, "alice");
        assert_eq!(first.extensions.get("traceId").map(String::as_str), Some("7 x"));
        assert_eq!(parse_client_first(b"y,,\x01auth=Bearer t\x01\x01").unwrap_err(), INVALID_FIRST_MESSAGE);
        assert_eq!(parse_client_first(b"n,,\x01auth=Bearer t\x01").unwrap_err(), INVALID_FIRST_MESSAGE);
        assert!(parse_client_first(b"n,,\x01x=1\x01\x01").unwrap_err().contains("'auth' not specified"));
        assert!(parse_client_first(b"n,,\x01auth=Basic dXNlcg\x01\x01").unwrap_err().contains("Invalid scheme"));
        assert!(parse_client_first(b"n,,\x01auth=Bearer a/b\x01\x01").unwrap_err().contains("invalid 'auth'"));
    }

    #[test]
    fn unsecured_tokens_as_kafkas_default_validator() {
        let s = settings();
        let exp = NOW_MS / 1000 + 60;
        let ok = validate(&s, &unsecured(&format!(r#"{{"sub":"alice","exp":{exp},"iat":1}}"#)), NOW_MS).unwrap();
        assert_eq!(ok, BearerToken { principal: "alice".into(), expires_at_ms: exp * 1000 });
        // Bad base64, not JSON, missing exp, missing sub, expired, iat in the future.
        let bad = [
            format!("{}.%%%.", enc(r#"{"alg":"none"}"#)),
            format!("{}.{}.", enc(r#"{"alg":"none"}"#), enc("[1]")),
            unsecured(r#"{"sub":"alice"}"#),
            unsecured(&format!(r#"{{"exp":{exp}}}"#)),
            unsecured(&format!(r#"{{"sub":"alice","exp":{}}}"#, NOW_MS / 1000 - 1)),
            unsecured(&format!(r#"{{"sub":"alice","exp":{exp},"iat":{}}}"#, NOW_MS / 1000 + 10)),
            format!("{}sig", unsecured(&format!(r#"{{"sub":"alice","exp":{exp}}}"#))),
            "only.two".to_string(),
        ];
        for token in &bad {
            let r = validate(&s, token, NOW_MS).unwrap_err();
            assert_eq!(r.challenge(), r#"{"status":"invalid_token"}"#, "{token}: {}", r.reason);
        }
        // Clock skew lets a just-expired token in.
        let skewed = OAuthSettings { clock_skew_ms: 5_000, ..settings() };
        let just_expired = unsecured(&format!(r#"{{"sub":"a","exp":{}}}"#, NOW_MS / 1000 - 1));
        assert!(validate(&skewed, &just_expired, NOW_MS).is_ok());
        // Another principal claim, and required scopes.
        let named = OAuthSettings { sub_claim: "user".into(), required_scopes: vec!["kafka".into()], ..settings() };
        let token = unsecured(&format!(r#"{{"user":"bob","exp":{exp},"scope":"read kafka"}}"#));
        assert_eq!(validate(&named, &token, NOW_MS).unwrap().principal, "bob");
        let token = unsecured(&format!(r#"{{"user":"bob","exp":{exp},"scope":["read"]}}"#));
        let r = validate(&named, &token, NOW_MS).unwrap_err();
        assert_eq!(r.challenge(), r#"{"status":"insufficient_scope", "scope":"kafka"}"#);
        // Not accepted once turned off.
        let off = OAuthSettings { allow_unsecured: false, ..settings() };
        assert!(validate(&off, &unsecured(&format!(r#"{{"sub":"a","exp":{exp}}}"#)), NOW_MS).is_err());
    }

    /// An ES256 key made here, its JWKS, and a signer.
    fn es256() -> (EcdsaKeyPair, Jwks) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let jwks = format!(
            r#"{{"keys":[{{"kty":"oct","k":"AA"}},{{"kty":"EC","crv":"P-256","kid":"k1","x":"{}","y":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(&point[1..33]),
            URL_SAFE_NO_PAD.encode(&point[33..65])
        );
        (pair, Jwks::parse(jwks.as_bytes()).unwrap())
    }

    fn sign(pair: &EcdsaKeyPair, header: &str, claims: &str) -> String {
        let signed = format!("{}.{}", enc(header), enc(claims));
        let sig = pair.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    #[test]
    fn signed_tokens_are_checked_against_the_jwks() {
        let (pair, jwks) = es256();
        let s = OAuthSettings {
            allow_unsecured: false,
            jwks: Some(SharedJwks::fixed(jwks)),
            expected_issuer: Some("https://issuer".into()),
            expected_audience: vec!["keel".into()],
            ..settings()
        };
        let exp = NOW_MS / 1000 + 60;
        let claims = format!(r#"{{"sub":"carol","exp":{exp},"iss":"https://issuer","aud":["x","keel"]}}"#);
        let token = sign(&pair, r#"{"alg":"ES256","kid":"k1"}"#, &claims);
        assert_eq!(validate(&s, &token, NOW_MS).unwrap().principal, "carol");
        // Signature mismatch: claims changed after signing.
        let (head, rest) = token.split_once('.').unwrap();
        let sig = rest.rsplit_once('.').unwrap().1;
        let forged = format!("{head}.{}.{sig}", enc(&claims.replace("carol", "mallory")));
        assert!(validate(&s, &forged, NOW_MS).unwrap_err().reason.contains("does not match"));
        // Another key's signature.
        let (other, _) = es256();
        let token = sign(&other, r#"{"alg":"ES256","kid":"k1"}"#, &claims);
        assert!(validate(&s, &token, NOW_MS).is_err());
        // Wrong audience, wrong issuer, unknown kid.
        let wrong_aud = claims.replace(r#"["x","keel"]"#, r#""other""#);
        let r = validate(&s, &sign(&pair, r#"{"alg":"ES256","kid":"k1"}"#, &wrong_aud), NOW_MS).unwrap_err();
        assert!(r.reason.contains("audience"));
        let wrong_iss = claims.replace("https://issuer", "https://evil");
        assert!(validate(&s, &sign(&pair, r#"{"alg":"ES256","kid":"k1"}"#, &wrong_iss), NOW_MS).is_err());
        let r = validate(&s, &sign(&pair, r#"{"alg":"ES256","kid":"k2"}"#, &claims), NOW_MS).unwrap_err();
        assert_eq!(r.unknown_kid.as_deref(), Some("k2"));
        assert_eq!(validate(&s, &forged, NOW_MS).unwrap_err().unknown_kid, None);
        // Unsecured tokens are refused once a JWKS is configured (the default).
        assert!(validate(&s, &unsecured(&claims), NOW_MS).is_err());
        // A signed token without a JWKS is refused.
        let no_jwks = settings();
        let r = validate(&no_jwks, &sign(&pair, r#"{"alg":"ES256"}"#, &claims), NOW_MS).unwrap_err();
        assert!(r.reason.contains("needs a JWKS"));
    }

    /// A fixed RSA test key (2048 bits, made with `openssl genpkey`), for RS256.
    const RSA_PKCS8_B64: &str = include_str!("testdata/rsa2048.pk8.b64");

    #[test]
    fn rs256_signatures_verify() {
        use base64::engine::general_purpose::STANDARD;
        use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
        let der = STANDARD.decode(RSA_PKCS8_B64.trim()).unwrap();
        let pair = RsaKeyPair::from_pkcs8(&der).unwrap();
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public());
        let jwks = format!(
            r#"{{"keys":[{{"kty":"RSA","alg":"RS256","n":"{}","e":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(&public.n),
            URL_SAFE_NO_PAD.encode(&public.e)
        );
        let s = OAuthSettings {
            allow_unsecured: false,
            jwks: Some(SharedJwks::fixed(Jwks::parse(jwks.as_bytes()).unwrap())),
            ..settings()
        };
        let signed = format!(
            "{}.{}",
            enc(r#"{"alg":"RS256"}"#),
            enc(&format!(r#"{{"sub":"dan","exp":{}}}"#, NOW_MS / 1000 + 5))
        );
        let mut sig = vec![0; pair.public().modulus_len()];
        pair.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signed.as_bytes(), &mut sig).unwrap();
        let token = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(&sig));
        assert_eq!(validate(&s, &token, NOW_MS).unwrap().principal, "dan");
        sig[10] ^= 1;
        let token = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(&sig));
        assert!(validate(&s, &token, NOW_MS).is_err());
    }
}
