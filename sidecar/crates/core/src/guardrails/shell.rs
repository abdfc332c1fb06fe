//! Reading a shell command as the guardrails and approval rules need it: its words (split by
//! `shlex`, quotes and escapes undone), its operators, the parameters it expands and the scripts
//! it hands to another shell. It runs nothing and reads no file.
//!
//! An operator is found outside quotes: `;`, `&`, `|`, `<`, `>`, `(`, `)` (a run of them is one
//! operator: `&&`, `||`, `>>`, `2>&1` reads `2`, `>&`, `1`), a newline, a backtick and `$(`.
//! Inside double quotes the shell still runs `$(…)` and backticks, so those count there too (as
//! operators after the word that holds them). A command the reader cannot split (an unclosed
//! quote, a trailing backslash) is an error: callers let no rule answer it.

use thiserror::Error;

/// A piece of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A word, its quotes and escapes undone.
    Word(String),
    /// An operator as written (`&&`, `|`, `>`, `$(`, a backtick, `\n`).
    Op(String),
}

/// Why a command cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the command has an unclosed quote or ends in a backslash")]
pub struct Unreadable;

/// Characters that make up an operator (a run of them is one operator).
const OPERATOR: &[char] = &[';', '&', '|', '<', '>', '(', ')'];

/// Programs whose `-c` option (alone or among others, as in `-lc`) takes a script.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];

/// How deep scripts handed to a shell (`sh -c '…'` inside `bash -c "…"`) are read.
const MAX_DEPTH: usize = 4;

/// Expansions that can only give a number or the shell's flags (`$?`, `$$`, `$!`, `$#`, `$-`).
const HARMLESS_EXPANSIONS: &[&str] = &["?", "$", "!", "#", "-"];

/// A command, read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Command {
    pub tokens: Vec<Token>,
    /// The parameters it expands outside single quotes: a name (`HOME` for `$HOME` and
    /// `${HOME…}`), a digit or a sign (`@`, `*`, `?`…), or `'` for an ANSI-C string `$'…'`.
    pub expansions: Vec<String>,
    /// The scripts it hands to a shell (`bash -c '…'`, `eval …`), read in turn.
    pub scripts: Vec<Command>,
}

#[derive(PartialEq, Clone, Copy)]
enum Quote {
    No,
    Single,
    Double,
    /// `$'…'`: backslash escapes, a single quote ends it.
    AnsiC,
}

impl Command {
    /// Reads `text`.
    pub fn read(text: &str) -> Result<Command, Unreadable> {
        Command::read_at(text, 0)
    }

    fn read_at(text: &str, depth: usize) -> Result<Command, Unreadable> {
        let mut command = Command::default();
        let mut segment = String::new();
        // Substitutions met inside double quotes, told after the word that holds them.
        let mut inside: Vec<Token> = Vec::new();
        let mut quote = Quote::No;
        let mut chars = text.chars().peekable();
        let flush = |segment: &mut String, inside: &mut Vec<Token>, out: &mut Vec<Token>| {
            let words = shlex::split(segment).ok_or(Unreadable)?;
            out.extend(words.into_iter().map(Token::Word));
            out.append(inside);
            segment.clear();
            Ok::<(), Unreadable>(())
        };
        while let Some(c) = chars.next() {
            match quote {
                Quote::Single => {
                    segment.push(c);
                    if c == '\'' {
                        quote = Quote::No;
                    }
                }
                // Given to `shlex` as a single-quoted string: `\x` as `x` (escapes are not
                // decoded: an ANSI-C string is an opaque expansion anyway), `\'` as `'\''`.
                Quote::AnsiC => match c {
                    '\\' => match chars.next() {
                        Some('\'') => segment.push_str("'\\''"),
                        Some(next) => segment.push(next),
                        None => return Err(Unreadable),
                    },
                    '\'' => {
                        segment.push(c);
                        quote = Quote::No;
                    }
                    _ => segment.push(c),
                },
                Quote::Double => {
                    segment.push(c);
                    match c {
                        '\\' => segment.extend(chars.next()),
                        '"' => quote = Quote::No,
                        '`' => inside.push(Token::Op("`".into())),
                        '$' if chars.peek() == Some(&'(') => inside.push(Token::Op("$(".into())),
                        '$' => command.note_expansion(&mut chars, &mut segment),
                        _ => {}
                    }
                }
                Quote::No => match c {
                    '\\' => match chars.next() {
                        // A line continuation: the shell drops both.
                        Some('\n') => {}
                        Some(next) => {
                            segment.push(c);
                            segment.push(next);
                        }
                        None => return Err(Unreadable),
                    },
                    '\'' => {
                        segment.push(c);
                        quote = Quote::Single;
                    }
                    '"' => {
                        segment.push(c);
                        quote = Quote::Double;
                    }
                    '$' if chars.peek() == Some(&'\'') => {
                        segment.extend(chars.next());
                        command.expansions.push("'".into());
                        quote = Quote::AnsiC;
                    }
                    // A comment, to the end of its line.
                    '#' if segment.is_empty() || segment.ends_with(char::is_whitespace) => {
                        while chars.next_if(|n| *n != '\n').is_some() {}
                    }
                    '`' | '\n' => {
                        flush(&mut segment, &mut inside, &mut command.tokens)?;
                        command.tokens.push(Token::Op(c.to_string()));
                    }
                    '$' if chars.peek() == Some(&'(') => {
                        flush(&mut segment, &mut inside, &mut command.tokens)?;
                        let mut op = String::from(c);
                        while let Some(next) = chars.next_if(|n| OPERATOR.contains(n)) {
                            op.push(next);
                        }
                        command.tokens.push(Token::Op(op));
                    }
                    '$' => {
                        segment.push(c);
                        command.note_expansion(&mut chars, &mut segment);
                    }
                    c if OPERATOR.contains(&c) => {
                        flush(&mut segment, &mut inside, &mut command.tokens)?;
                        let mut op = String::from(c);
                        while let Some(next) = chars.next_if(|n| OPERATOR.contains(n)) {
                            op.push(next);
                        }
                        command.tokens.push(Token::Op(op));
                    }
                    _ => segment.push(c),
                },
            }
        }
        if quote != Quote::No {
            return Err(Unreadable);
        }
        flush(&mut segment, &mut inside, &mut command.tokens)?;
        if depth < MAX_DEPTH {
            for script in command.handed_scripts() {
                // A script the reader cannot split is one bash would refuse too.
                if let Ok(read) = Command::read_at(&script, depth + 1) {
                    command.scripts.push(read);
                }
            }
        }
        Ok(command)
    }

    /// Notes the parameter the `$` just read expands (the text itself stays in the word).
    fn note_expansion(
        &mut self,
        chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
        segment: &mut String,
    ) {
        const SIGNS: &str = "@*#?$!-";
        let is_name = |c: &char| c.is_ascii_alphanumeric() || *c == '_';
        let name: String = match chars.peek().copied() {
            // `${NAME…}`, `${#NAME}` (a length); `${!NAME}` (indirect) could be anything.
            Some('{') => {
                let mut ahead = chars.clone();
                ahead.next();
                match ahead.next_if(|c| SIGNS.contains(*c)) {
                    Some('#') => "#".into(),
                    Some(sign) => format!("{{{sign}"),
                    None => std::iter::from_fn(|| ahead.next_if(is_name)).collect(),
                }
            }
            // `$1`, `$@`, `$?`…: one character, taken here so that `$$HOME` is not `$HOME`.
            Some(c) if c.is_ascii_digit() || SIGNS.contains(c) => {
                chars.next();
                segment.push(c);
                c.to_string()
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let mut ahead = chars.clone();
                std::iter::from_fn(|| ahead.next_if(is_name)).collect()
            }
            // A lone `$` (before a space, a slash, a quote or the end) is itself.
            _ => return,
        };
        self.expansions
            .push(if name.is_empty() { "{".into() } else { name });
    }

    /// Whether the command has an operator (it is a list, a pipeline, a redirection or a
    /// substitution, not one plain command).
    pub fn is_compound(&self) -> bool {
        self.tokens.iter().any(|t| matches!(t, Token::Op(_)))
    }

    /// The parameters it (or a script it hands to a shell) expands that could give any text,
    /// such as a path Troupe cannot see (`$HOME` among them; not `$?`, `$$`, `$!`, `$#`, `$-`).
    pub fn opaque_expansions(&self) -> impl Iterator<Item = &str> {
        self.all()
            .flat_map(|c| c.expansions.iter().map(String::as_str))
            .filter(|e| !HARMLESS_EXPANSIONS.contains(e))
    }

    /// Whether it (or a script it hands to a shell) expands `$HOME`.
    pub fn expands_home(&self) -> bool {
        self.all()
            .any(|c| c.expansions.iter().any(|e| e.as_str() == "HOME"))
    }

    /// The words that may name a path, in order: every word but an option's flag (`-rf`), the
    /// value after the first `=` of a word that has one (`--out=/x`, `PATH=~/bin`), then the
    /// same of the scripts it hands to a shell.
    pub fn path_words(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for c in self.all() {
            for t in &c.tokens {
                let Token::Word(w) = t else { continue };
                if !w.starts_with('-') {
                    out.push(w.as_str());
                }
                if let Some((_, value)) = w.split_once('=')
                    && !value.is_empty()
                {
                    out.push(value);
                }
            }
        }
        out
    }

    /// This command and every script it hands to a shell, depth first.
    fn all(&self) -> Box<dyn Iterator<Item = &Command> + '_> {
        Box::new(std::iter::once(self).chain(self.scripts.iter().flat_map(Command::all)))
    }

    /// The scripts this command hands to a shell: the word after `-c` (or a cluster of single
    /// letter options with a `c`, as in `-lc`) of a shell program, and the words after `eval`,
    /// joined as the shell joins them.
    fn handed_scripts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for simple in self.tokens.split(|t| matches!(t, Token::Op(_))) {
            let words: Vec<&str> = simple
                .iter()
                .filter_map(|t| match t {
                    Token::Word(w) => Some(w.as_str()),
                    Token::Op(_) => None,
                })
                .collect();
            for (i, word) in words.iter().enumerate() {
                let program = word.rsplit('/').next().unwrap_or(word);
                if program == "eval" {
                    out.push(words[i + 1..].join(" "));
                    break;
                }
                if !SHELLS.contains(&program) {
                    continue;
                }
                // Options up to the first operand; a cluster of single letters with a `c`
                // (`-c`, `-lc`, `-ec`) makes the next word the script.
                let mut rest = words[i + 1..].iter();
                while let Some(option) = rest.next() {
                    if option.starts_with("--") {
                        continue;
                    }
                    if !option.starts_with('-') {
                        break;
                    }
                    if option.contains('c') {
                        out.extend(rest.next().map(|s| (*s).to_string()));
                        break;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
