//! Generated bindings, one module per released WIT version; private to this crate (WIT is an
//! ABI: callers see our own types, converted at the boundary in `calls.rs`).

pub(crate) mod v0_1_0 {
    pub(crate) mod executor {
        wasmtime::component::bindgen!({
            path: "../../../wit/v0.1.0",
            world: "executor",
            imports: { "troupe:plugin/tools.call-tool": async },
            exports: { default: async },
        });
    }

    pub(crate) mod router {
        wasmtime::component::bindgen!({
            path: "../../../wit/v0.1.0",
            world: "router",
            with: { "troupe:plugin/host": super::executor::troupe::plugin::host },
            exports: { default: async },
        });
    }

    pub(crate) mod recovery {
        wasmtime::component::bindgen!({
            path: "../../../wit/v0.1.0",
            world: "recovery",
            with: { "troupe:plugin/host": super::executor::troupe::plugin::host },
            exports: { default: async },
        });
    }
}
