//! Principals: `User:ANONYMOUS` for connections nobody authenticated, the SASL user
//! name, or the subject of a client certificate in the form Kafka's default principal
//! builder gives it (`X500Principal.getName()`, RFC 2253: `CN=client,OU=eng,O=Acme`,
//! most specific part first). Kafka's `ssl.principal.mapping.rules` are not read yet:
//! the whole subject is the name.
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
        assert_eq!(dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).unwrap(), "1.2.840.113549.1.9.1");
    }
}
