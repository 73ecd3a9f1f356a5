// mimalloc instead of glibc's malloc: reading PyTorch's pickled flight-recorder dumps
// (serde-pickle builds a value per opcode and clones every memoised string on each use)
// spends about a third of its time allocating; mimalloc took about 30% off that reading
// (benches/flight_recorder.rs, which declares the same allocator).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fabprobe::cli::main()
}
