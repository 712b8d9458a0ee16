//! Which addresses the network tools may reach (SSRF protection).
//!
//! A model-chosen URL must not reach the machine's own services, the local network or a
//! cloud metadata endpoint (`169.254.169.254` hands out credentials). The check runs on the
//! addresses the host name resolves to, not on the name, so `localhost`, a DNS name pointing
//! at `10.0.0.5`, `0x7f000001` and `[::ffff:127.0.0.1]` are all caught; it runs again on
//! every redirect; and the request then connects to the checked address (pinned), so a DNS
//! answer that changes between check and connect (rebinding) cannot slip through.
//!
//! IPv6 addresses that carry an IPv4 address (IPv4-mapped and -compatible, NAT64, 6to4,
//! Teredo) are judged by the IPv4 address they carry, and the machine's own addresses (its
//! LAN or public IP, which reach services listening on all interfaces) are refused like
//! loopback (issue #15).

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fabric_engine::ToolError;

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
        let own = own_addresses();
        for addr in &addrs {
            if let Some(kind) = forbidden_kind(addr.ip(), &own)
                && !self.ip_allowed(addr.ip())
            {
                return Err(ToolError::Denied {
                    event_type: ADDRESS_DENIED.to_owned(),
                    attempted: url.to_owned(),
                    message: format!(
                        "{tool} refused {url}: `{bare}` resolves to {}, {}. {tool} reaches public addresses only; the operator can allow this one with `network.allow_hosts` (or all private ones with `network.allow_private: true`) in the config. Use a public source instead",
                        addr.ip(),
                        describe(&kind)
                    ),
                });
            }
        }
        Ok(addrs)
    }
}

/// The kind of one of this machine's own addresses.
const OWN: &str = "own";

/// What kind of non-public address `ip` is, or `None` for a public one. `own` holds this
/// machine's addresses (see [`own_addresses`]).
pub(crate) fn forbidden_kind(ip: IpAddr, own: &[IpAddr]) -> Option<Cow<'static, str>> {
    let kind = match ip {
        IpAddr::V4(v4) => v4_kind(v4).map(Cow::Borrowed),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4_kind(v4).map(Cow::Borrowed),
            None => v6_kind(v6)
                .map(Cow::Borrowed)
                .or_else(|| embedded_kind(v6).map(Cow::Owned)),
        },
    };
    kind.or_else(|| {
        own.contains(&ip.to_canonical())
            .then_some(Cow::Borrowed(OWN))
    })
}

/// A kind as the refusal names it: "a loopback address".
fn describe(kind: &str) -> String {
    if kind == OWN {
        "one of this machine's own addresses (which reach every service listening on all its interfaces)".to_owned()
    } else {
        format!("{} {kind} address", article(kind))
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
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

/// The kind of an IPv6 address that carries a non-public IPv4 address, e.g. "6to4 address
/// embedding a private IPv4": traffic to it ends at that IPv4 address (through a NAT64
/// gateway, a 6to4 relay, a Teredo tunnel or the host's own stack), so it is judged by it.
fn embedded_kind(ip: Ipv6Addr) -> Option<String> {
    embedded_v4(ip)
        .into_iter()
        .find_map(|(mechanism, role, v4)| {
            v4_kind(v4)
                .map(|kind| format!("{mechanism} address {role} {} {kind} IPv4", article(kind)))
        })
}

/// The IPv4 addresses `ip` carries, each with its mechanism and how the kind names it.
fn embedded_v4(ip: Ipv6Addr) -> Vec<(&'static str, &'static str, Ipv4Addr)> {
    const EMBEDDING: &str = "embedding";
    let s = ip.segments();
    let o = ip.octets();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let last = v4(s[6], s[7]);
    match s {
        // ::/96 minus `::` and `::1` (refused before): IPv4-compatible, deprecated (RFC 4291).
        [0, 0, 0, 0, 0, 0, ..] => vec![("IPv4-compatible", EMBEDDING, last)],
        // ::ffff:0:0/96: IPv4-translated (SIIT, RFC 2765).
        [0, 0, 0, 0, 0xffff, 0, ..] => vec![("IPv4-translated", EMBEDDING, last)],
        // 64:ff9b::/96: the well-known NAT64 prefix (RFC 6052), IPv4 in the last 32 bits.
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => vec![("NAT64", EMBEDDING, last)],
        // 64:ff9b:1::/48: local-use NAT64 (RFC 8215). The operator picks the prefix length,
        // which decides where the IPv4 address sits (RFC 6052 §2.2: /48, /56, /64 or /96
        // here), so every layout that fits the address is checked; bits 64-71 and the
        // suffix are zero in all but /96. This may refuse a public address whose /96 form
        // happens to read as a non-public one in another layout; it never lets one through.
        [0x64, 0xff9b, 1, ..] => {
            let zero = |range: std::ops::Range<usize>| o[range].iter().all(|b| *b == 0);
            let mut found = vec![("NAT64", EMBEDDING, last)];
            if o[8] == 0 && zero(11..16) {
                found.push(("NAT64", EMBEDDING, Ipv4Addr::new(o[6], o[7], o[9], o[10])));
            }
            if o[8] == 0 && zero(12..16) {
                found.push(("NAT64", EMBEDDING, Ipv4Addr::new(o[7], o[9], o[10], o[11])));
            }
            if o[8] == 0 && zero(13..16) {
                found.push(("NAT64", EMBEDDING, Ipv4Addr::new(o[9], o[10], o[11], o[12])));
            }
            found
        }
        // 2002::/16: 6to4 (RFC 3056), IPv4 in bits 16-48.
        [0x2002, hi, lo, ..] => vec![("6to4", EMBEDDING, v4(hi, lo))],
        // 2001::/32: Teredo (RFC 4380). The client's IPv4 is the last 32 bits inverted; the
        // server's is bits 32-64.
        [0x2001, 0, hi, lo, ..] => vec![
            ("Teredo", EMBEDDING, Ipv4Addr::from(!u32::from(last))),
            ("Teredo", "whose server is", v4(hi, lo)),
        ],
        _ => Vec::new(),
    }
}

/// This machine's own addresses, from `getifaddrs(3)`: a public or LAN address of the machine
/// reaches every service bound to `0.0.0.0` or `::` just like loopback does.
///
/// Cached for [`OWN_ADDRESSES_FRESH`], not for the life of the process: a long-running
/// `fabric serve` sees addresses change (DHCP, a VPN coming up), and listing them takes
/// one cheap system call.
///
/// Why `getifaddrs` through `nix`: the workspace forbids `unsafe`, so it cannot call libc
/// itself; rustix has no `getifaddrs`; `nix` (already in the lockfile) wraps it safely and
/// lists IPv4 and IPv6 alike. Reading `/proc/net/if_inet6` and `/proc/net/fib_trie` would
/// be Linux-only and parse text not meant as an interface; binding a socket to each
/// candidate address would be wrong on hosts with `ip_nonlocal_bind` set.
fn own_addresses() -> Arc<[IpAddr]> {
    static CACHE: Mutex<Option<(Instant, Arc<[IpAddr]>)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((listed, addrs)) = cache.as_ref()
        && listed.elapsed() < OWN_ADDRESSES_FRESH
    {
        return Arc::clone(addrs);
    }
    let addrs: Arc<[IpAddr]> = list_own_addresses().into();
    *cache = Some((Instant::now(), Arc::clone(&addrs)));
    addrs
}

/// How long a listing of the machine's own addresses is used.
const OWN_ADDRESSES_FRESH: Duration = Duration::from_secs(30);

fn list_own_addresses() -> Vec<IpAddr> {
    match nix::ifaddrs::getifaddrs() {
        Ok(interfaces) => interfaces
            .filter_map(|interface| interface.address)
            .filter_map(|addr| {
                addr.as_sockaddr_in()
                    .map(|a| IpAddr::V4(a.ip()))
                    .or_else(|| addr.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
            })
            .map(|ip| ip.to_canonical())
            .collect(),
        Err(e) => {
            // The other checks still hold; only the machine's non-private addresses are
            // not recognised until a later listing succeeds.
            tracing::warn!(error = %e, "cannot list this machine's addresses (getifaddrs)");
            Vec::new()
        }
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
            assert_eq!(
                forbidden_kind(ip.parse().unwrap(), &[]).as_deref(),
                Some(kind),
                "{ip}"
            );
        }
        for ip in ["1.1.1.1", "93.184.216.34", "2606:4700::1111"] {
            assert_eq!(forbidden_kind(ip.parse().unwrap(), &[]), None, "{ip}");
        }
    }

    #[test]
    fn issue_15_ipv6_addresses_embedding_a_non_public_ipv4_are_refused() {
        for (ip, kind) in [
            // IPv4-compatible ::/96.
            (
                "::127.0.0.1",
                "IPv4-compatible address embedding a loopback IPv4",
            ),
            (
                "::10.0.0.1",
                "IPv4-compatible address embedding a private IPv4",
            ),
            (
                "::0.0.0.2",
                "IPv4-compatible address embedding an unspecified IPv4",
            ),
            // IPv4-translated ::ffff:0:0/96.
            (
                "::ffff:0:7f00:1",
                "IPv4-translated address embedding a loopback IPv4",
            ),
            // NAT64, well-known prefix.
            (
                "64:ff9b::a9fe:a9fe",
                "NAT64 address embedding a cloud-metadata IPv4",
            ),
            (
                "64:ff9b::127.0.0.1",
                "NAT64 address embedding a loopback IPv4",
            ),
            (
                "64:ff9b::6440:1",
                "NAT64 address embedding a shared (carrier-grade NAT) IPv4",
            ),
            // Local-use NAT64 64:ff9b:1::/48: the /96 layout, and the /64 one (IPv4 in
            // bits 72-104) holding 192.168.1.1.
            (
                "64:ff9b:1::c0a8:101",
                "NAT64 address embedding a private IPv4",
            ),
            (
                "64:ff9b:1:0:c0:a801:100::",
                "NAT64 address embedding a private IPv4",
            ),
            // 6to4, IPv4 in bits 16-48.
            ("2002:c0a8:0101::1", "6to4 address embedding a private IPv4"),
            ("2002:7f00:1::", "6to4 address embedding a loopback IPv4"),
            (
                "2002:a9fe:a9fe::1",
                "6to4 address embedding a cloud-metadata IPv4",
            ),
            // Teredo: client 192.168.1.1 (inverted c0a8:0101), client 127.0.0.1, and a public
            // client 8.8.8.8 behind the server 10.0.0.1.
            (
                "2001:0:4136:e378:8000:63bf:3f57:fefe",
                "Teredo address embedding a private IPv4",
            ),
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                "Teredo address embedding a loopback IPv4",
            ),
            (
                "2001:0:a00:1::f7f7:f7f7",
                "Teredo address whose server is a private IPv4",
            ),
        ] {
            assert_eq!(
                forbidden_kind(ip.parse().unwrap(), &[]).as_deref(),
                Some(kind),
                "{ip}"
            );
        }
        for ip in [
            "2002:0808:0808::1",
            "64:ff9b::808:808",
            "64:ff9b:1::808:808",
            "::8.8.8.8",
            // Teredo with a public client (192.0.2.45 here is not in a refused range) and
            // a public server 65.54.227.120.
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
        ] {
            assert_eq!(forbidden_kind(ip.parse().unwrap(), &[]), None, "{ip}");
        }
    }

    #[test]
    fn issue_15_the_refusal_names_the_embedded_ipv4() {
        let kind = forbidden_kind("2002:c0a8:0101::1".parse().unwrap(), &[]).unwrap();
        assert_eq!(
            describe(&kind),
            "a 6to4 address embedding a private IPv4 address"
        );
        let kind = forbidden_kind("::127.0.0.1".parse().unwrap(), &[]).unwrap();
        assert_eq!(
            describe(&kind),
            "an IPv4-compatible address embedding a loopback IPv4 address"
        );
    }

    #[test]
    fn issue_15_the_machines_own_addresses_are_refused() {
        // 203.0.113.9 stands for the machine's public address: public by every other rule.
        let own: Vec<IpAddr> = vec![
            "203.0.113.9".parse().unwrap(),
            "2a01:4f8::5".parse().unwrap(),
        ];
        for ip in ["203.0.113.9", "::ffff:203.0.113.9", "2a01:4f8::5"] {
            assert_eq!(
                forbidden_kind(ip.parse().unwrap(), &own).as_deref(),
                Some(OWN),
                "{ip}"
            );
            assert_eq!(forbidden_kind(ip.parse().unwrap(), &[]), None, "{ip}");
        }
        assert!(describe(OWN).contains("this machine's own addresses"));
    }

    #[tokio::test]
    async fn issue_15_the_machines_listed_addresses_are_refused_unless_private_is_allowed() {
        let deny = AddressPolicy::default();
        let allow = AddressPolicy {
            allow_private: true,
            allow_hosts: Vec::new(),
        };
        // Whatever interfaces this machine has; at least one (loopback), or the loop below
        // would check nothing (issue #27).
        let listed = list_own_addresses();
        assert!(
            !listed.is_empty(),
            "getifaddrs listed no address: this test would check nothing"
        );
        for ip in listed {
            let host = ip.to_string();
            let url = format!("http://{}/", SocketAddr::new(ip, 80));
            let err = deny.check("fetch_url", &url, &host, 80).await.unwrap_err();
            assert!(
                matches!(&err, ToolError::Denied { event_type, .. } if event_type == ADDRESS_DENIED),
                "{ip}: {err:?}"
            );
            assert!(
                allow.check("fetch_url", &url, &host, 80).await.is_ok(),
                "{ip}"
            );
            let by_host = AddressPolicy {
                allow_private: false,
                allow_hosts: vec![host.clone()],
            };
            assert!(
                by_host.check("fetch_url", &url, &host, 80).await.is_ok(),
                "{ip}"
            );
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
