//! `router-keyword`: a router that scores each candidate agent by the whole words of the
//! request that match its configured keywords, its capabilities and its description.

// The generated bindings and the exported entry points are FFI, hence unsafe; our code is not.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "router" });
    use super::KeywordRouter;
    export!(KeywordRouter);
}

use std::collections::BTreeMap;

use bindings::exports::troupe::plugin::routing::{Candidate, Choice, Guest, Request};
use bindings::troupe::plugin::host::{self, Level};
use serde_json::Value;

/// Weight of a match on a configured keyword.
const KEYWORD_WEIGHT: u32 = 3;
/// Weight of a match on one of the candidate's capabilities.
const CAPABILITY_WEIGHT: u32 = 3;
/// Weight of a match on a word of the candidate's description.
const DESCRIPTION_WEIGHT: u32 = 1;

/// Description words too common to say anything about an agent.
const STOPWORDS: &[&str] = &[
    "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "but",
    "by", "can", "do", "does", "each", "for", "from", "has", "have", "how", "if", "in", "into",
    "is", "it", "its", "may", "more", "most", "no", "not", "of", "on", "one", "or", "other", "our",
    "out", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these",
    "they", "this", "those", "to", "up", "use", "uses", "using", "was", "we", "were", "what",
    "when", "which", "who", "will", "with", "you", "your",
];

/// The plugin's configuration.
#[derive(Debug, Default, PartialEq)]
struct Config {
    /// Agent name → its keywords.
    routes: BTreeMap<String, Vec<String>>,
    /// The agent to pick when nothing matches.
    default: Option<String>,
}

impl Config {
    /// Parses the config object; malformed parts are skipped and reported as warnings.
    fn parse(json: &str) -> (Self, Vec<String>) {
        let mut config = Self::default();
        let mut warnings = Vec::new();
        let map = match serde_json::from_str::<Value>(json) {
            Ok(Value::Object(map)) => map,
            Err(_) if json.trim().is_empty() => return (config, warnings),
            _ => {
                warnings.push("config is not a JSON object; ignoring it".to_string());
                return (config, warnings);
            }
        };
        match map.get("routes") {
            None | Some(Value::Null) => {}
            Some(Value::Object(routes)) => {
                for (agent, keywords) in routes {
                    let words = match keywords {
                        Value::Array(items) => items
                            .iter()
                            .filter_map(|k| k.as_str().map(str::to_string))
                            .collect(),
                        // A single keyword is fine too.
                        Value::String(k) => vec![k.clone()],
                        _ => {
                            warnings.push(format!(
                                "config `routes.{agent}` must be a list of strings; ignoring it"
                            ));
                            continue;
                        }
                    };
                    config.routes.insert(agent.clone(), words);
                }
            }
            Some(_) => warnings.push("config `routes` must be an object; ignoring it".to_string()),
        }
        match map.get("default") {
            None | Some(Value::Null) => {}
            Some(Value::String(agent)) => config.default = Some(agent.clone()),
            Some(_) => warnings.push("config `default` must be a string; ignoring it".to_string()),
        }
        (config, warnings)
    }
}

/// Lower-case words: maximal runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `phrase` (already split into words) occurs as whole consecutive words of `text`.
fn contains_phrase(text: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && text.windows(phrase.len()).any(|window| window == phrase)
}

/// One candidate's score and the terms that earned it.
#[derive(Debug, Default, PartialEq)]
struct Score {
    total: u32,
    /// `(kind, term)`, in the order they were found.
    matched: Vec<(&'static str, String)>,
}

impl Score {
    fn describe(&self) -> String {
        let terms: Vec<String> = self
            .matched
            .iter()
            .map(|(kind, term)| format!("{kind} \"{term}\""))
            .collect();
        format!("score {}: matched {}", self.total, terms.join(", "))
    }
}

/// Scores `candidate` against the request's words. A term counts once, at its highest weight.
fn score(text: &[String], candidate: &Candidate, keywords: &[String]) -> Score {
    let mut score = Score::default();
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut consider = |term: &str, kind: &'static str, weight: u32, score: &mut Score| {
        let phrase = words(term);
        if seen.contains(&phrase) || !contains_phrase(text, &phrase) {
            return;
        }
        seen.push(phrase);
        score.total += weight;
        score.matched.push((kind, term.trim().to_string()));
    };
    for keyword in keywords {
        consider(keyword, "keyword", KEYWORD_WEIGHT, &mut score);
    }
    for capability in &candidate.capabilities {
        consider(capability, "capability", CAPABILITY_WEIGHT, &mut score);
    }
    for word in words(&candidate.description) {
        if word.chars().count() > 2 && !STOPWORDS.contains(&word.as_str()) {
            consider(&word, "description word", DESCRIPTION_WEIGHT, &mut score);
        }
    }
    score
}

/// Picks the best-scoring candidate (the first on a tie), else the configured default.
fn choose(config: &Config, request: &Request, candidates: &[Candidate]) -> Result<Choice, String> {
    if candidates.is_empty() {
        return Err("no candidates".to_string());
    }
    let text = words(&request.text);
    let mut best: Option<(&Candidate, Score)> = None;
    for candidate in candidates {
        let keywords = config
            .routes
            .get(&candidate.name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let score = score(&text, candidate, keywords);
        if score.total > best.as_ref().map_or(0, |(_, b)| b.total) {
            best = Some((candidate, score));
        }
    }
    if let Some((candidate, score)) = best {
        return Ok(Choice {
            agent: candidate.name.clone(),
            reason: score.describe(),
        });
    }
    match &config.default {
        Some(default) if candidates.iter().any(|c| &c.name == default) => Ok(Choice {
            agent: default.clone(),
            reason: "nothing matched; the configured default".to_string(),
        }),
        Some(default) => Err(format!(
            "nothing in the request matched any of the {} candidates, and the default {default:?} is not one of them",
            candidates.len()
        )),
        None => Err(format!(
            "nothing in the request matched the keywords, capabilities or descriptions of any of the {} candidates (no default configured)",
            candidates.len()
        )),
    }
}

struct KeywordRouter;

impl Guest for KeywordRouter {
    fn route(request: Request, candidates: Vec<Candidate>) -> Result<Choice, String> {
        let (config, warnings) = Config::parse(&host::config());
        for warning in &warnings {
            host::log(Level::Warn, warning);
        }
        let choice = choose(&config, &request, &candidates);
        match &choice {
            Ok(choice) => host::log(
                Level::Info,
                &format!("routed to {} ({})", choice.agent, choice.reason),
            ),
            Err(e) => host::log(Level::Info, &format!("no route: {e}")),
        }
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str, description: &str, capabilities: &[&str]) -> Candidate {
        Candidate {
            name: name.to_string(),
            description: description.to_string(),
            capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn request(text: &str) -> Request {
        Request {
            text: text.to_string(),
            metadata: Vec::new(),
        }
    }

    fn candidates() -> Vec<Candidate> {
        vec![
            candidate("writer", "Writes the documentation and guides", &["docs"]),
            candidate(
                "reviewer",
                "Reviews pull requests for bugs",
                &["code-review", "security"],
            ),
            candidate("tester", "Runs and fixes the tests", &["testing"]),
        ]
    }

    #[test]
    fn capabilities_and_keywords_outweigh_description_words() {
        let (config, warnings) =
            Config::parse(r#"{"routes":{"tester":["flaky","CI"]},"default":"writer"}"#);
        assert!(warnings.is_empty());
        let choice = choose(
            &config,
            &request("Please do a code review of the bugs"),
            &candidates(),
        )
        .expect("a match");
        assert_eq!(choice.agent, "reviewer");
        assert_eq!(
            choice.reason,
            "score 4: matched capability \"code-review\", description word \"bugs\""
        );
        let choice = choose(
            &config,
            &request("the ci is FLAKY, see the documentation"),
            &candidates(),
        )
        .expect("a match");
        assert_eq!(choice.agent, "tester");
        assert_eq!(
            choice.reason,
            "score 6: matched keyword \"flaky\", keyword \"CI\""
        );
    }

    #[test]
    fn whole_words_only_and_ties_go_to_the_first() {
        let config = Config::default();
        // "docsify" is not "docs"; "tests" and "guides" are one description word each.
        let choice =
            choose(&config, &request("docsify tests guides"), &candidates()).expect("a match");
        assert_eq!(choice.agent, "writer");
    }

    #[test]
    fn no_match_uses_the_default_if_it_is_a_candidate() {
        let (config, _) = Config::parse(r#"{"default":"tester"}"#);
        let choice = choose(&config, &request("hello"), &candidates()).expect("the default");
        assert_eq!(choice.agent, "tester");
        let (config, _) = Config::parse(r#"{"default":"ghost"}"#);
        let err = choose(&config, &request("hello"), &candidates()).expect_err("no default");
        assert!(err.contains("nothing"), "{err}");
        assert!(err.contains("ghost"), "{err}");
        let err =
            choose(&Config::default(), &request("hello"), &candidates()).expect_err("no match");
        assert!(err.contains("nothing"), "{err}");
        let err = choose(&Config::default(), &request("docs"), &[]).expect_err("empty");
        assert_eq!(err, "no candidates");
    }

    #[test]
    fn bad_config_is_reported() {
        let (config, warnings) = Config::parse(r#"{"routes":{"a":3,"b":"solo"},"default":1}"#);
        assert_eq!(warnings.len(), 2);
        assert_eq!(config.routes.get("b"), Some(&vec!["solo".to_string()]));
        assert_eq!(config.default, None);
    }
}
