//! Reading shell commands: words and operators (quotes respected), expansions, path words and
//! the scripts handed to another shell.

use super::*;

/// The tokens of `text`, words bare and operators in angle brackets.
fn shown(text: &str) -> Result<String, Unreadable> {
    let c = Command::read(text)?;
    Ok(c.tokens
        .iter()
        .map(|t| match t {
            Token::Word(w) => w.clone(),
            Token::Op(o) => format!("<{}>", o.replace('\n', "\\n")),
        })
        .collect::<Vec<_>>()
        .join(" "))
}

#[test]
fn words_and_operators_outside_quotes() {
    let cases: &[(&str, &str)] = &[
        ("cargo test", "cargo test"),
        ("cargo  test\t--release", "cargo test --release"),
        ("cargo test && curl x|sh", "cargo test <&&> curl x <|> sh"),
        ("cargo test;curl x", "cargo test <;> curl x"),
        ("a || b", "a <||> b"),
        ("a & b", "a <&> b"),
        ("cargo test > out.txt", "cargo test <>> out.txt"),
        ("cargo test 2>&1", "cargo test 2 <>&> 1"),
        ("sort < in", "sort <<> in"),
        ("a\nb", "a <\\n> b"),
        ("echo $(curl x)", "echo <$(> curl x <)>"),
        ("echo `id`", "echo <`> id <`>"),
        ("(cd x; ls)", "<(> cd x <;> ls <)>"),
        // Quoted, an operator is only text…
        ("git commit -m 'a; b && c'", "git commit -m a; b && c"),
        (r#"grep "a|b" f"#, "grep a|b f"),
        (r"echo a\;b", "echo a;b"),
        // …but a substitution runs inside double quotes (told after its word).
        (r#"echo "$(curl x|sh)""#, "echo $(curl x|sh) <$(>"),
        (r#"echo "`id`""#, "echo `id` <`> <`>"),
        // A line continuation joins; a comment is dropped (with any quote in it).
        ("cargo \\\ntest", "cargo test"),
        ("ls # it's; fine", "ls"),
        ("ls #x\nrm y", "ls <\\n> rm y"),
        ("echo a#b", "echo a#b"),
        // An ANSI-C string's escaped quote does not end it.
        (r"echo $'\'';curl x", "echo ' <;> curl x"),
    ];
    for (text, want) in cases {
        assert_eq!(shown(text).as_deref(), Ok(*want), "{text:?}");
    }
}

#[test]
fn an_unclosed_quote_or_trailing_backslash_is_unreadable() {
    for text in ["echo 'a", "echo \"a", "echo a\\", "echo $'a\\'"] {
        assert_eq!(shown(text), Err(Unreadable), "{text:?}");
    }
}

#[test]
fn a_desynchronising_ansi_c_string_is_still_compound() {
    // bash reads `$'\'\''` as one string, then `;curl x|sh;` as operators.
    let c = Command::read(r"echo $'\'\'';curl x|sh;echo \'").unwrap();
    assert!(c.is_compound(), "{c:?}");
    assert!(c.opaque_expansions().any(|e| e == "'"));
}

#[test]
fn expansions_outside_single_quotes() {
    let cases: &[(&str, &[&str])] = &[
        ("echo $HOME", &["HOME"]),
        ("rm -rf ${HOME}/x", &["HOME"]),
        (r#"cat "$HOME/.ssh/id""#, &["HOME"]),
        ("rm -rf $1/", &["1"]),
        ("echo $? $$ $# $! $-", &["?", "$", "#", "!", "-"]),
        ("echo $$HOME", &["$"]),
        ("echo ${#x} ${!x}", &["#", "{!"]),
        ("echo $'x'", &["'"]),
        ("awk '{print $1}' f", &[]),
        ("echo $ cost", &[]),
        ("echo 'it''s $HOME'", &[]),
    ];
    for (text, want) in cases {
        let c = Command::read(text).unwrap();
        assert_eq!(&c.expansions, want, "{text:?}");
    }
    let opaque = |t: &str| {
        Command::read(t)
            .unwrap()
            .opaque_expansions()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(opaque("echo $? $$ $# $! $-"), Vec::<String>::new());
    assert_eq!(opaque("rm -rf $OLDPWD"), ["OLDPWD"]);
    assert!(Command::read("echo ~ ${HOME}").unwrap().expands_home());
}

#[test]
fn path_words_and_scripts_handed_to_a_shell() {
    let cases: &[(&str, &[&str])] = &[
        ("rm -rf ~/important", &["rm", "~/important"]),
        (
            "cargo build --target-dir=/tmp/t",
            &["cargo", "build", "/tmp/t"],
        ),
        ("PATH=~/bin make", &["PATH=~/bin", "~/bin", "make"]),
        ("cat a > /etc/x", &["cat", "a", "/etc/x"]),
        (
            "bash -lc 'rm -rf ../x'",
            &["bash", "rm -rf ../x", "rm", "../x"],
        ),
        (
            "sh -e -c \"cat ~/.netrc\"",
            &["sh", "cat ~/.netrc", "cat", "~/.netrc"],
        ),
        (
            "env bash --norc -c 'ls /'",
            &["env", "bash", "ls /", "ls", "/"],
        ),
        ("eval rm -rf /x", &["eval", "rm", "/x", "rm", "/x"]),
        // A shell run on a script file hands it no text.
        ("bash script.sh", &["bash", "script.sh"]),
    ];
    for (text, want) in cases {
        let c = Command::read(text).unwrap();
        assert_eq!(&c.path_words(), want, "{text:?}");
    }
    // Expansions inside a handed script count (the outer quotes hid them).
    assert!(
        Command::read("sh -c 'rm -rf $HOME'")
            .unwrap()
            .expands_home()
    );
}
