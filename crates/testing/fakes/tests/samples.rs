//! The fakes' own checks: a sample event of every kind decodes as the fabric's own events do.
#![allow(missing_docs)]

use fabric_domain::EventKind;
use fabric_domain::runlog::EventPayload;
use serde_json::json;

#[test]
fn a_sample_of_every_kind_decodes_with_the_fields_a_test_names() {
    for kind in EventKind::ALL {
        let sample = fabric_fakes::sample(kind, 1.0, json!({"pack_index": 1}));
        assert!(
            !matches!(sample.payload, EventPayload::Unreadable { .. }),
            "{sample:?}"
        );
        assert_eq!(sample.kind(), kind);
        assert_eq!(sample.member, Some(1));
    }
    let call = fabric_fakes::sample(EventKind::ToolCall, 2.0, json!({"tool": "shell"}));
    assert!(matches!(call.payload, EventPayload::ToolCall(c) if c.tool == "shell"));
}
