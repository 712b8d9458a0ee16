//! Which addresses the network tools may reach (SSRF protection).
//!
//! A model-chosen URL must not reach the machine's own services, the local network or a
//! cloud metadata endpoint (`169.254.169.254` hands out credentials). The check runs on the
//! addresses the host name resolves to, not on the name, so `localhost`, a DNS name pointing
//! at `10.0.0.5`, `0x7f000001` and `[::ffff:127.0.0.1]` are all caught; it runs again on
//! every redirect; and the request then connects to the checked address (pinned), so a DNS
//! answer that changes between check and connect (rebinding) cannot slip through.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use fabric_core::ToolError;

/// The `event_type` of a refused destination.
pub(crate) const ADDRESS_DENIED: &str = "address_denied";

/// What the network tools may reach besides public addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// Allow every private, loopback, link-local and metadata address.
    pub allow_private: bool,
    /// Host names, addresses and CIDR ranges allowed even though private.
    pub allow_hosts: Vec<String>,
}

impl AddressPolicy {
    /// Whether `host` (as written in the URL) is allowed by name.
    fn host_allowed(&self, host: &str) -> bool {
        self.allow_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Whether `ip` is allowed by address or range.
    fn ip_allowed(&self, ip: IpAddr) -> bool {
        self.allow_hosts.iter().any(|entry| in_range(entry, ip))
    }

    /// Resolves `host:port` and returns the addresses to connect to, or a refusal naming the
    /// first forbidden one.
    pub(crate) async fn check(
        &self,
        tool: &str,
        url: &str,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, ToolError> {
        // `[::1]` arrives with brackets from the URL.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|e| ToolError::Failed(format!("cannot resolve `{bare}`: {e}")))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ToolError::Failed(format!(
                "`{bare}` resolves to no address"
            )));
        }
        if self.allow_private || self.host_allowed(bare) {
            return Ok(addrs);
        }
        for addr in &addrs {
            if let Some(kind) = forbidden_kind(addr.ip())
                && !self.ip_allowed(addr.ip())
            {
                return Err(ToolError::Denied {
                    event_type: ADDRESS_DENIED.to_owned(),
                    attempted: url.to_owned(),
                    message: format!(
                        "{tool} refused {url}: `{bare}` resolves to {}, a {kind} address. {tool} reaches public addresses only; the operator can allow this one with `network.allow_hosts` (or all private ones with `network.allow_private: true`) in the config. Use a public source instead",
                        addr.ip()
                    ),
                });
            }
        }
        Ok(addrs)
    }
}

/// What kind of non-public address `ip` is, or `None` for a public one.
pub(crate) fn forbidden_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4_kind(v4),
            None => v6_kind(v6),
        },
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        Some("cloud-metadata")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        Some("broadcast, multicast or reserved")
    } else {
        None
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if first & 0xfe00 == 0xfc00 {
        // fc00::/7, which also holds AWS's metadata address fd00:ec2::254.
        Some("private (unique local)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else {
        None
    }
}

/// Whether `ip` matches `entry`: an address (`10.1.2.3`) or a CIDR range (`10.0.0.0/8`).
fn in_range(entry: &str, ip: IpAddr) -> bool {
    let (base, bits) = match entry.split_once('/') {
        Some((base, bits)) => match bits.parse::<u32>() {
            Ok(bits) => (base, Some(bits)),
            Err(_) => return false,
        },
        None => (entry, None),
    };
    let Ok(base) = base.parse::<IpAddr>() else {
        return false;
    };
    match (base, ip) {
        (IpAddr::V4(base), IpAddr::V4(ip)) => {
            let bits = bits.unwrap_or(32).min(32);
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(base) & mask == u32::from(ip) & mask
        }
        (IpAddr::V6(base), IpAddr::V6(ip)) => {
            let bits = bits.unwrap_or(128).min(128);
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(base) & mask == u128::from(ip) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_named() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "cloud-metadata"),
            ("169.254.1.1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("fd00:ec2::254", "private (unique local)"),
            ("fe80::1", "link-local"),
        ] {
            assert_eq!(forbidden_kind(ip.parse().unwrap()), Some(kind), "{ip}");
        }
        for ip in ["1.1.1.1", "93.184.216.34", "2606:4700::1111"] {
            assert_eq!(forbidden_kind(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn ranges_match() {
        assert!(in_range("10.0.0.0/8", "10.9.9.9".parse().unwrap()));
        assert!(!in_range("10.0.0.0/8", "11.0.0.1".parse().unwrap()));
        assert!(in_range("127.0.0.2", "127.0.0.2".parse().unwrap()));
        assert!(!in_range("127.0.0.2", "127.0.0.1".parse().unwrap()));
        assert!(in_range("fd00::/8", "fd00:ec2::254".parse().unwrap()));
        assert!(in_range("0.0.0.0/0", "8.8.8.8".parse().unwrap()));
        assert!(!in_range("nonsense", "8.8.8.8".parse().unwrap()));
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allowed() {
        let deny = AddressPolicy::default();
        let err = deny
            .check("fetch_url", "http://localhost/", "localhost", 80)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::Denied { event_type, .. } if event_type == ADDRESS_DENIED),
            "{err:?}"
        );
        let allow = AddressPolicy {
            allow_private: false,
            allow_hosts: vec!["127.0.0.0/8".to_owned()],
        };
        assert!(
            allow
                .check("fetch_url", "http://127.0.0.1/", "127.0.0.1", 80)
                .await
                .is_ok()
        );
    }
}
