//! Test and benchmark support: a component of a `troupe:plugin` world made from hand-written
//! core WAT and the WIT (wit-component), so host tests and the benchmark need no guest
//! toolchain. Compiled only for the unit tests (`src/tests.rs`) and `benches/plugins.rs`.

#![allow(clippy::unwrap_used, dead_code)]

pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../wit/v0.1.0");

/// Encodes core `wat` as a component of `world` in the WIT at `wit` (a dir or inline text).
pub fn component(wit: Wit<'_>, world: &str, wat: &str) -> Vec<u8> {
    let mut resolve = wit_parser::Resolve::default();
    let pkg = match wit {
        Wit::Dir(dir) => resolve.push_dir(dir).unwrap().0,
        Wit::Inline(text) => resolve.push_str("inline.wit", text).unwrap(),
    };
    let world = resolve.select_world(&[pkg], Some(world)).unwrap();
    let mut module = wat::parse_str(wat).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

pub enum Wit<'a> {
    Dir(&'a str),
    Inline(&'a str),
}
