//! `sandbox-probe`: a router that tries everything a plugin must not be able to do (read a
//! host file, list `/`, read the environment, open a TCP connection to the port named in the
//! request's `port` metadata) and answers with an error describing each outcome, so a test can
//! check that every attempt was refused. It never routes.

#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "router" });
    use super::Probe;
    export!(Probe);
}

use bindings::exports::troupe::plugin::routing::{Candidate, Choice, Guest, Request};

struct Probe;

fn outcome<T>(what: &str, r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => format!("{what}: ALLOWED"),
        Err(e) => format!("{what}: refused ({e})"),
    }
}

impl Guest for Probe {
    fn route(request: Request, _candidates: Vec<Candidate>) -> Result<Choice, String> {
        let port = request
            .metadata
            .iter()
            .find(|(k, _)| k == "port")
            .and_then(|(_, v)| v.parse::<u16>().ok())
            .unwrap_or(9);
        let env = std::env::vars().count();
        let report = [
            outcome("read /etc/passwd", std::fs::read_to_string("/etc/passwd")),
            outcome("list /", std::fs::read_dir("/")),
            outcome("write /tmp/escape", std::fs::write("/tmp/escape", b"x")),
            outcome(
                "connect 127.0.0.1",
                std::net::TcpStream::connect(("127.0.0.1", port)),
            ),
            if env == 0 {
                "environment: empty".to_string()
            } else {
                format!("environment: ALLOWED ({env} variables)")
            },
        ];
        Err(report.join("; "))
    }
}
