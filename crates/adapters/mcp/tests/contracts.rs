//! Seed 004's parity rule: the MCP tool definition and the OpenAI function definition of
//! every tool are generated from the one `ToolSpec`, and both adapters accept them.

use fabric_core::lazy::LazyTools;
use fabric_core::{StaticTools, Tool};
use fabric_tools::{NoOsSandbox, ProcessSandbox, ToolPolicy, engineering_tools};
use std::sync::Arc;

fn every_tool() -> Vec<Arc<dyn Tool>> {
    let sandbox: Arc<dyn ProcessSandbox> = Arc::new(NoOsSandbox);
    let mut tools = engineering_tools(&Arc::new(ToolPolicy::default()), &sandbox);
    let lazy = LazyTools::new(Arc::new(StaticTools::new(Vec::new(), Vec::new())));
    tools.extend(lazy.meta_tools().iter().cloned());
    tools
}

#[test]
fn mcp_and_openai_definitions_agree_for_every_built_in_tool() {
    let tools = every_tool();
    assert!(tools.len() >= 8, "six built-in tools and two meta-tools");
    for tool in tools {
        let spec = tool.spec();
        tool.check_contract().unwrap_or_else(|e| panic!("{e}"));
        let def = spec.tool_def();
        let mcp = spec.mcp_definition();
        assert_eq!(mcp["name"], def.name, "{}", spec.name);
        assert_eq!(mcp["description"], def.description, "{}", spec.name);
        assert_eq!(mcp["inputSchema"], def.parameters, "{}", spec.name);
        assert_eq!(
            mcp["annotations"]["readOnlyHint"],
            spec.annotations.read_only
        );
        assert_eq!(
            mcp["annotations"]["destructiveHint"],
            spec.annotations.destructive
        );
        assert_eq!(
            mcp["annotations"]["openWorldHint"],
            spec.annotations.needs_network
        );
        // The MCP SDK's own type accepts the definition as it is.
        let parsed: rmcp::model::Tool =
            serde_json::from_value(mcp.clone()).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        assert_eq!(parsed.name, spec.name.as_str());
        let back = serde_json::to_value(&parsed).unwrap_or_default();
        assert_eq!(back["inputSchema"], spec.input_schema, "{}", spec.name);
        // Planner hints reach the model through the description in both adapters.
        for next in &spec.planner.next_tools {
            let d = mcp["description"].as_str().unwrap_or_default();
            assert!(d.contains(next.as_str()), "{}: {d}", spec.name);
        }
    }
}
