//! The process builder: what a started command withholds, carries and how it is grouped.

use super::*;

#[tokio::test]
async fn a_command_withholds_the_daemons_secrets_and_has_its_group_and_marker() {
    let mut cmd = command("sh", Group::Own, Some("run-1"));
    let envs: Vec<(String, Option<String>)> = cmd
        .as_std()
        .get_envs()
        .map(|(k, v)| {
            let text = |s: &OsStr| s.to_string_lossy().into_owned();
            (text(k), v.map(text))
        })
        .collect();
    for name in crate::sandbox::WITHHELD_ENV {
        assert!(envs.contains(&(name.to_string(), None)), "{envs:?}");
    }
    assert!(
        envs.contains(&(RUN_MARKER.to_string(), Some("run-1".into()))),
        "{envs:?}"
    );
    let out = cmd
        .arg("-c")
        .arg(format!(
            "echo \"${RUN_MARKER} $(cut -d' ' -f5 /proc/$$/stat) $$\""
        ))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{text}");
    assert_eq!(words[0], "run-1", "{text}");
    // A group of its own: the shell leads it.
    assert_eq!(words[1], words[2], "{text}");
}
