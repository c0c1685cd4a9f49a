//! Names of a claim's requests as results carry them: `req` for a request,
//! `req/sub` for one of its `firstAvailable` alternatives.

/// The top-level request of a result's request reference: `req` for `req`
/// and for its subrequest `req/sub` (a `firstAvailable` alternative). A
/// container names only top-level requests (`resources.claims[].request`), and
/// the kubelet hands it the CDI devices whose `request_names` contain that name
/// (pkg/kubelet/cm/dra/claiminfo.go `cdiDevicesAsList`); upstream drivers map
/// results the same way (k8s.io/dynamic-resource-allocation/resourceclaim
/// `BaseRequestRef`).
pub fn top_level_request(request: &str) -> &str {
    request.split_once('/').map_or(request, |(parent, _)| parent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subrequest_belongs_to_its_top_level_request() {
        assert_eq!(top_level_request("vf/fast"), "vf");
        assert_eq!(top_level_request("vf"), "vf");
    }
}
