//! Listener specs in Kafka's form, `NAME://HOST:PORT` (`listeners`,
//! `advertised.listeners`). A listener's name is its security protocol, as in a Kafka
//! configuration without `listener.security.protocol.map`; so each protocol has at
//! most one listener.

/// Kafka's security protocols (`security.protocol`, listener prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Some(match name {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }
}

/// One listener: where it binds, what clients are told, how it authenticates.
#[derive(Debug, Clone, PartialEq)]
pub struct Listener {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// HOST:PORT to bind.
    pub addr: String,
    /// Host and port given to clients who came in on this listener.
    pub advertised_host: String,
    pub advertised_port: i32,
}

/// Parses `NAME://HOST:PORT`.
pub fn parse_spec(spec: &str) -> Result<(SecurityProtocol, String, String, i32), String> {
    let (name, addr) =
        spec.trim().split_once("://").ok_or_else(|| format!("listener {spec:?}: expected NAME://HOST:PORT"))?;
    let protocol = SecurityProtocol::parse(name).ok_or_else(|| {
        format!("listener {spec:?}: unknown security protocol {name:?} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)")
    })?;
    let (host, port) = split_host_port(addr).ok_or_else(|| format!("listener {spec:?}: expected NAME://HOST:PORT"))?;
    Ok((protocol, addr.to_string(), host, port))
}

/// Splits `HOST:PORT` (an IPv6 host in brackets).
pub fn split_host_port(addr: &str) -> Option<(String, i32)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: i32 = port.parse().ok().filter(|p| (0..=65535).contains(p))?;
    Some((host.trim_matches(['[', ']']).to_string(), port))
}

/// The listeners of `listeners` with their advertised addresses: an advertised
/// listener of the same name, else the bound address.
pub fn resolve(listeners: &[String], advertised: &[String]) -> Result<Vec<Listener>, String> {
    let mut out: Vec<Listener> = Vec::new();
    for spec in listeners {
        let (protocol, addr, host, port) = parse_spec(spec)?;
        if out.iter().any(|l| l.protocol == protocol) {
            return Err(format!("listener {} is given twice", protocol.name()));
        }
        out.push(Listener {
            name: protocol.name().to_string(),
            protocol,
            addr,
            advertised_host: host,
            advertised_port: port,
        });
    }
    for spec in advertised {
        let (protocol, _, host, port) = parse_spec(spec)?;
        let l = out
            .iter_mut()
            .find(|l| l.protocol == protocol)
            .ok_or_else(|| format!("advertised listener {} has no listener of that name", protocol.name()))?;
        l.advertised_host = host;
        l.advertised_port = port;
    }
    if out.is_empty() {
        return Err("at least one listener is needed".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_take_kafkas_form_and_advertised_addresses_by_name() {
        let l = resolve(
            &["PLAINTEXT://127.0.0.1:9092".into(), "SASL_SSL://0.0.0.0:9093".into()],
            &["SASL_SSL://broker.example:19093".into()],
        )
        .unwrap();
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!((l[0].advertised_host.as_str(), l[0].advertised_port), ("127.0.0.1", 9092));
        assert_eq!(l[1].addr, "0.0.0.0:9093");
        assert_eq!((l[1].advertised_host.as_str(), l[1].advertised_port), ("broker.example", 19093));
        assert!(resolve(&["TLS://a:1".into()], &[]).is_err());
        assert!(resolve(&["SSL://a:1".into(), "SSL://a:2".into()], &[]).is_err());
        assert!(resolve(&["SSL://a:1".into()], &["PLAINTEXT://b:2".into()]).is_err());
        assert!(resolve(&["SSL://a".into()], &[]).is_err());
    }
}
