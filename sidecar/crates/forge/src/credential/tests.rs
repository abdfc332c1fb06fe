//! Finding the person's credential, with a fake environment.
use super::*;

fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[test]
fn the_environment_gives_the_token_in_gh_s_order_for_each_kind_of_host() {
    let both = env_of(&[("GH_TOKEN", " gh-one\n"), ("GITHUB_TOKEN", "github-one")]);
    assert_eq!(discover("github.com", &both).unwrap().expose(), "gh-one");
    let blank_first = env_of(&[("GH_TOKEN", "  "), ("GITHUB_TOKEN", "github-one")]);
    assert_eq!(
        discover("GitHub.com", &blank_first).unwrap().expose(),
        "github-one"
    );
    assert_eq!(discover("octo.ghe.com", &both).unwrap().expose(), "gh-one");

    // An enterprise server takes only the enterprise pair.
    let enterprise = env_of(&[
        ("GH_TOKEN", "not-for-it"),
        ("GITHUB_ENTERPRISE_TOKEN", "ent-two"),
    ]);
    assert_eq!(
        discover("ghe.example.com", &enterprise).unwrap().expose(),
        "ent-two"
    );
    let enterprise_both = env_of(&[
        ("GH_ENTERPRISE_TOKEN", "ent-one"),
        ("GITHUB_ENTERPRISE_TOKEN", "ent-two"),
    ]);
    assert_eq!(
        discover("ghe.example.com", &enterprise_both)
            .unwrap()
            .expose(),
        "ent-one"
    );
    assert!(discover("github.com", &enterprise_both).is_err());
}

#[test]
fn without_a_credential_the_error_names_the_ways_to_give_one() {
    // No PATH in this environment: `gh` is not looked for.
    let err = discover("github.com", &env_of(&[])).unwrap_err();
    assert!(matches!(err, ForgeError::Credential(_)));
    assert!(!err.retryable());
    let text = err.to_string();
    for way in ["gh auth login", "GH_TOKEN", "GITHUB_TOKEN"] {
        assert!(text.contains(way), "{text}");
    }
    let text = discover("ghe.example.com", &env_of(&[]))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("gh auth login --hostname ghe.example.com")
            && text.contains("GH_ENTERPRISE_TOKEN"),
        "{text}"
    );
}

#[test]
fn a_token_s_debug_never_shows_it() {
    let token = discover("github.com", &env_of(&[("GH_TOKEN", "ghp_secret")])).unwrap();
    assert!(!format!("{token:?}").contains("ghp_secret"));
}
