fn main() -> std::process::ExitCode {
    safe_python_executor::mcp::main()
}
