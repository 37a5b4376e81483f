//! Tests of the mirror states, the state file and the transitions.

use super::file::{decode_mirror_state, encode_mirror_state, MalformedReason, MirrorStateError};
use super::state::{MirrorPartitionState, StopPolicy, StoppingStep};

fn roundtrip(state: MirrorPartitionState) {
    let text = encode_mirror_state(&state).unwrap();
    assert_eq!(
        decode_mirror_state(text.as_bytes()).unwrap(),
        state,
        "{text}"
    );
}

#[test]
fn every_state_round_trips() {
    roundtrip(MirrorPartitionState::Local);
    roundtrip(MirrorPartitionState::Mirroring {
        source_cluster_id: "a=b c".into(),
        leader_epoch: 14,
        full_truncation_pending: false,
    });
    roundtrip(MirrorPartitionState::Mirroring {
        source_cluster_id: "A".into(),
        leader_epoch: 10,
        full_truncation_pending: true,
    });
    assert_eq!(
        encode_mirror_state(&MirrorPartitionState::Mirroring {
            source_cluster_id: "A".into(),
            leader_epoch: 10,
            full_truncation_pending: true,
        })
        .unwrap(),
        "2\nMIRRORING\nsource=A\nleader_epoch=10\ntruncate_fully=pending\n"
    );
    roundtrip(MirrorPartitionState::Mirroring {
        source_cluster_id: "A".into(),
        leader_epoch: -1,
        full_truncation_pending: false,
    });
    roundtrip(MirrorPartitionState::Stopping {
        step: StoppingStep::FeedStopped,
        source_cluster_id: "A".into(),
        lso: 0,
        last_mirrored_offset: None,
        last_mirrored_epoch: None,
        leader_epoch: None,
        policy: StopPolicy::TruncateToLastStable,
    });
    roundtrip(MirrorPartitionState::Stopping {
        step: StoppingStep::Truncated,
        source_cluster_id: "A".into(),
        lso: i64::MAX,
        last_mirrored_offset: Some(7),
        last_mirrored_epoch: Some(-1),
        leader_epoch: None,
        policy: StopPolicy::TruncateToLastStable,
    });
    roundtrip(MirrorPartitionState::Stopping {
        step: StoppingStep::EpochBumped,
        source_cluster_id: "A".into(),
        lso: 7,
        last_mirrored_offset: Some(7),
        last_mirrored_epoch: Some(i32::MAX - 1),
        leader_epoch: Some(i32::MAX),
        policy: StopPolicy::TruncateToLastStable,
    });
    roundtrip(MirrorPartitionState::Stopped {
        barrier_offset: 42,
        last_mirror_epoch: 3,
    });
    roundtrip(MirrorPartitionState::Stopped {
        barrier_offset: 42,
        last_mirror_epoch: -1,
    });
}

#[test]
fn unrepresentable_states_are_refused() {
    for state in [
        MirrorPartitionState::Mirroring {
            source_cluster_id: String::new(),
            leader_epoch: 0,
            full_truncation_pending: false,
        },
        MirrorPartitionState::Mirroring {
            source_cluster_id: "a\nb".into(),
            leader_epoch: 0,
            full_truncation_pending: false,
        },
        MirrorPartitionState::Mirroring {
            source_cluster_id: "A".into(),
            leader_epoch: -2,
            full_truncation_pending: false,
        },
        MirrorPartitionState::Stopped {
            barrier_offset: -1,
            last_mirror_epoch: 0,
        },
        MirrorPartitionState::Stopped {
            barrier_offset: 1,
            last_mirror_epoch: -2,
        },
        MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 3,
            last_mirrored_offset: Some(3),
            last_mirrored_epoch: Some(0),
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        },
        MirrorPartitionState::Stopping {
            step: StoppingStep::Truncated,
            source_cluster_id: "A".into(),
            lso: 3,
            last_mirrored_offset: None,
            last_mirrored_epoch: None,
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        },
        MirrorPartitionState::Stopping {
            step: StoppingStep::Truncated,
            source_cluster_id: "A".into(),
            lso: 3,
            last_mirrored_offset: Some(3),
            last_mirrored_epoch: Some(-2),
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        },
        MirrorPartitionState::Stopping {
            step: StoppingStep::EpochBumped,
            source_cluster_id: "A".into(),
            lso: 3,
            last_mirrored_offset: Some(3),
            last_mirrored_epoch: Some(0),
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        },
    ] {
        let r = encode_mirror_state(&state);
        assert!(
            matches!(r, Err(MirrorStateError::Unrepresentable(ref s)) if *s == state),
            "{r:?}"
        );
    }
}

#[test]
fn non_utf8_reports_its_line() {
    let r = decode_mirror_state(b"1\nMIRRORING\nsource=\xff\n");
    assert_eq!(r, Err((3, MalformedReason::NotUtf8)));
}
