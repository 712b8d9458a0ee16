mod fixture;

mod attacks;
mod cli_errors;
mod delegation;
mod durability;
mod llm_failures;
mod logs;
mod loop_errors;
mod mcp_client;
mod mcp_server;
mod recruit_and_models;
mod run_basic;
mod serve;
mod serve_fixture;
mod specialists;
mod store;
mod workers;
