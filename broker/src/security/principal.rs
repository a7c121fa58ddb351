//! Principals: `User:ANONYMOUS` for connections nobody authenticated, the SASL user
//! name, or the subject of a client certificate in the form Kafka's default principal
//! builder gives it (`X500Principal.getName()`, RFC 2253: `CN=client,OU=eng,O=Acme`,
//! most specific part first), turned into a name by Kafka's `ssl.principal.mapping.rules`
//! ([`MappingRules`]; by default the whole subject is the name).
//!
//! The subject is read with a small DER walker instead of an X.509 library: Keel needs
//! one field of a certificate rustls has already verified.

use std::fmt;
use std::rc::Rc;

/// A Kafka principal; Keel's are all of type `User`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: Rc<str>,
}

impl Principal {
    pub fn anonymous() -> Principal {
        Principal { name: Rc::from("ANONYMOUS") }
    }

    pub fn user(name: &str) -> Principal {
        Principal { name: Rc::from(name) }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

/// Kafka's `ssl.principal.mapping.rules` (its SslPrincipalMapper): rules tried in
/// order on a certificate's subject; `RULE:pattern/replacement/` applies when the
/// pattern matches the whole subject and gives the replacement (`$1` for a group),
/// lower- or upper-cased with a trailing `L` or `U`; `DEFAULT` gives the subject
/// itself. No rule applying refuses the certificate, as Kafka refuses it.
#[derive(Debug)]
pub struct MappingRules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
enum Rule {
    Default,
    Replace { pattern: regex::Regex, whole: regex::Regex, replacement: String, case: Option<char> },
}

impl MappingRules {
    /// Parses the rules as Kafka's configuration takes them: comma-separated, a
    /// pattern or replacement may hold an escaped `/` or `,`.
    pub fn parse(spec: &str) -> Result<MappingRules, String> {
        let mut rules = Vec::new();
        let mut rest = spec.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after).ok_or_else(|| format!("invalid rule: {rest}"))?;
                let (replacement, after) = until_slash(after).ok_or_else(|| format!("invalid rule: {rest}"))?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let compile =
                    |p: &str| regex::Regex::new(p).map_err(|e| format!("invalid rule pattern {pattern:?}: {e}"));
                rules.push(Rule::Replace {
                    whole: compile(&format!("^(?:{pattern})$"))?,
                    pattern: compile(&pattern)?,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!("invalid rule: {rest}"));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => return Err(format!("invalid rule: {rest}")),
            }
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(MappingRules { rules })
    }

    /// The principal name of a subject, or `None` if no rule applies.
    pub fn name_of(&self, subject: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(subject.to_string()),
            Rule::Replace { pattern, whole, replacement, case } => {
                if !whole.is_match(subject) {
                    return None;
                }
                let name = pattern.replace_all(subject, replacement.as_str()).into_owned();
                Some(match case {
                    Some('L') => name.to_lowercase(),
                    Some('U') => name.to_uppercase(),
                    _ => name,
                })
            }
        })
    }
}

impl Default for MappingRules {
    fn default() -> Self {
        MappingRules { rules: vec![Rule::Default] }
    }
}

/// Splits at the first `/` not escaped by a backslash: (the part, unescaped; the rest).
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, next)) => {
                    out.push('\\');
                    out.push(next);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &s[i + 1..])),
            _ => out.push(c),
        }
    }
    None
}

/// A Java replacement string (`$1`, `\$` for a dollar) in the regex crate's form
/// (`${1}`, `$$`).
fn java_replacement(java: &str) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// One DER element: tag and contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The certificate's subject in RFC 2253 form, or `None` if the DER is not a
/// certificate.
pub fn subject_of_certificate(der: &[u8]) -> Option<String> {
    let (SEQUENCE, cert, _) = element(der)? else { return None };
    let (SEQUENCE, tbs, _) = element(cert)? else { return None };
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after; // explicit version
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, name, _) = element(rest)? else { return None };
    rfc2253(name)
}

/// A Name's RDNs, last first, as RFC 2253 writes them.
fn rfc2253(mut name: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (SET, mut set, rest) = element(name)? else { return None };
        name = rest;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (SEQUENCE, atv, rest) = element(set)? else { return None };
            set = rest;
            let (OID, oid, value) = element(atv)? else { return None };
            parts.push(attribute(oid, value)?);
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn attribute(oid: &[u8], value_der: &[u8]) -> Option<String> {
    let keyword = match oid {
        [0x55, 0x04, 0x03] => Some("CN"),
        [0x55, 0x04, 0x06] => Some("C"),
        [0x55, 0x04, 0x07] => Some("L"),
        [0x55, 0x04, 0x08] => Some("ST"),
        [0x55, 0x04, 0x09] => Some("STREET"),
        [0x55, 0x04, 0x0a] => Some("O"),
        [0x55, 0x04, 0x0b] => Some("OU"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => Some("DC"),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => Some("UID"),
        _ => None,
    };
    let (tag, value, _) = element(value_der)?;
    let text = match tag {
        0x0c | 0x13 | 0x16 | 0x14 => std::str::from_utf8(value).ok().map(str::to_string),
        0x1e => {
            let units: Vec<u16> = value.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    };
    match (keyword, text) {
        (Some(k), Some(t)) => Some(format!("{k}={}", escape(&t))),
        // As Java does for attributes it has no keyword for: the OID and the value's
        // DER in hex.
        _ => {
            let hex: String =
                value_der[..value_der.len() - element(value_der)?.2.len()].iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("{}=#{hex}", dotted(oid)?))
        }
    }
}

fn dotted(oid: &[u8]) -> Option<String> {
    let (&first, rest) = oid.split_first()?;
    let mut parts = vec![(first / 40) as u64, (first % 40) as u64];
    let mut acc = 0u64;
    for &b in rest {
        acc = (acc << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            parts.push(acc);
            acc = 0;
        }
    }
    Some(parts.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
}

/// RFC 2253 section 2.4 escaping.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    fn rdn(oid: &[u8], value: &str) -> Vec<u8> {
        let atv = [tlv(OID, oid), tlv(0x0c, value.as_bytes())].concat();
        tlv(SET, &tlv(SEQUENCE, &atv))
    }

    #[test]
    fn the_subject_reads_most_specific_first_with_escapes() {
        let name = [rdn(&[0x55, 4, 6], "US"), rdn(&[0x55, 4, 10], "Acme, Inc"), rdn(&[0x55, 4, 3], "client")].concat();
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &[]),
            tlv(SEQUENCE, &name),
        ]
        .concat();
        let cert = tlv(SEQUENCE, &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[])].concat());
        assert_eq!(subject_of_certificate(&cert).as_deref(), Some("CN=client,O=Acme\\, Inc,C=US"));
        assert_eq!(subject_of_certificate(&cert[..cert.len() - 3]), None);
        assert_eq!(subject_of_certificate(b"garbage"), None);
    }

    #[test]
    fn mapping_rules_as_kafkas_ssl_principal_mapper() {
        let rules = MappingRules::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/U,DEFAULT",
        )
        .unwrap();
        assert_eq!(rules.name_of("CN=Duke,OU=ServiceUsers,O=Org,C=US").as_deref(), Some("duke"));
        assert_eq!(rules.name_of("CN=Duke,OU=Sales,O=Org").as_deref(), Some("DUKE@SALES"));
        assert_eq!(rules.name_of("CN=client,O=Acme").as_deref(), Some("CN=client,O=Acme"));
        // Without DEFAULT, a subject no rule matches has no principal.
        let strict = MappingRules::parse("RULE:^CN=([a-z]+)$/$1/").unwrap();
        assert_eq!(strict.name_of("CN=alice").as_deref(), Some("alice"));
        assert_eq!(strict.name_of("CN=alice,O=Acme"), None);
        // An escaped slash in a pattern, a literal dollar in a replacement.
        let escaped = MappingRules::parse(r"RULE:^CN=(.*)\/x$/\$$1/").unwrap();
        assert_eq!(escaped.name_of("CN=a/x").as_deref(), Some("$a"));
        assert_eq!(MappingRules::parse("").unwrap().name_of("CN=x").as_deref(), Some("CN=x"));
        assert!(MappingRules::parse("RULE:^CN=(.*$/x/").is_err(), "a pattern that does not compile");
        assert!(MappingRules::parse("RULE:abc").is_err());
        assert!(MappingRules::parse("NONSENSE").is_err());
        assert_eq!(dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).unwrap(), "1.2.840.113549.1.9.1");
    }
}
