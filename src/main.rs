fn main() -> std::process::ExitCode {
    fabprobe::cli::main()
}
