//! The statuses: their words, widths, errors and JSON.

use super::*;

#[test]
fn a_status_says_its_word_and_takes_a_width() {
    assert_eq!(format!("[{:<9}]", MemberStatus::Running), "[running  ]");
    assert_eq!(StepState::InReview.to_string(), "in_review");
    assert_eq!("in_review".parse::<StepState>(), Ok(StepState::InReview));
    let err = "lost".parse::<PartyStatus>().unwrap_err();
    assert_eq!(
        err,
        "unknown PartyStatus \"lost\" (expected one of: pending, running, completed, failed, cancelled)"
    );
    assert_eq!(
        serde_json::to_value(TaskStatus::InProgress).unwrap(),
        serde_json::json!("in_progress")
    );
}
