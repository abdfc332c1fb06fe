//! The retention rules as `config.toml` gives them: defaults for what it leaves out, integers
//! or fractions, and a wrong key or value named.

use super::Rules;

fn rules_of(text: Option<&str>) -> Result<Rules, String> {
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = text {
        std::fs::write(dir.path().join("config.toml"), text).unwrap();
    }
    Rules::load(dir.path())
}

#[test]
fn the_rules_default_and_are_read_from_config_toml() {
    let defaults = Rules {
        max_age_days: 30.0,
        max_db_mib: 1024.0,
        max_log_mib: 16.0,
    };
    assert_eq!(rules_of(None).unwrap(), defaults);
    assert_eq!(rules_of(Some("nats = \"nats://x\"\n")).unwrap(), defaults);
    let set = rules_of(Some("[retention]\nmax_age_days = 7\nmax_log_mib = 0.5\n")).unwrap();
    assert_eq!(
        set,
        Rules {
            max_age_days: 7.0,
            max_log_mib: 0.5,
            ..defaults
        }
    );
    assert_eq!(set.max_log_bytes(), Some(512 * 1024));
    assert_eq!(
        rules_of(Some("[retention]\nmax_log_mib = 0\n"))
            .unwrap()
            .max_log_bytes(),
        None,
        "0: never rotated"
    );
    let typo = rules_of(Some("[retention]\nmax_age = 7\n")).unwrap_err();
    assert!(
        typo.contains("\"max_age\"") && typo.contains("max_age_days"),
        "{typo}"
    );
    let negative = rules_of(Some("[retention]\nmax_db_mib = -1\n")).unwrap_err();
    assert!(
        negative.contains("max_db_mib must be a number"),
        "{negative}"
    );
    let text = rules_of(Some("[retention]\nmax_age_days = \"30\"\n")).unwrap_err();
    assert!(text.contains("max_age_days"), "{text}");
}

/// An age past `MAX_AGE_DAYS` (SQLite has no date before the year 0) is named, not taken.
#[test]
fn an_age_past_a_hundred_years_is_refused() {
    let largest = rules_of(Some("[retention]\nmax_age_days = 36500\n")).unwrap();
    assert_eq!(largest.max_age_days, super::MAX_AGE_DAYS);
    let huge = rules_of(Some("[retention]\nmax_age_days = 2461373\n")).unwrap_err();
    assert!(
        huge.contains("max_age_days must be between 0 and 36500") && huge.contains("2461373"),
        "{huge}"
    );
}
