//! `fabprobe gen-docs DIR`: man pages (`fabprobe.1`, `fabprobe-<cmd>.1`) and shell
//! completions (`completions/`), all generated from the one clap definition.
//! `tests/docs.rs` fails when the committed `man/` differs from a fresh generation.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

use super::Outcome;

#[derive(Debug, Args)]
pub struct GenDocsArgs {
    /// Directory to write into (created if missing); the repository keeps it in `man/`.
    #[arg(default_value = "man")]
    pub dir: PathBuf,
}

pub fn run(a: GenDocsArgs) -> anyhow::Result<Outcome> {
    generate(&a.dir)?;
    Ok(Outcome::Pass)
}

/// Write every page and completion file into `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<()> {
    let comp_dir = dir.join("completions");
    std::fs::create_dir_all(&comp_dir)
        .with_context(|| format!("cannot create {}", comp_dir.display()))?;
    let mut cmd = super::command();
    cmd.build();
    write_page(dir, "fabprobe.1", cmd.clone())?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("fabprobe-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .display_name(name.clone())
            .bin_name(name.clone());
        write_page(dir, &format!("{name}.1"), page)?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut c = super::command();
        clap_complete::generate_to(shell, &mut c, "fabprobe", &comp_dir).with_context(|| {
            format!(
                "cannot write {shell} completions into {}",
                comp_dir.display()
            )
        })?;
    }
    Ok(())
}

fn write_page(dir: &Path, file: &str, cmd: clap::Command) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd)
        .source(format!("fabprobe {}", env!("CARGO_PKG_VERSION")))
        .render(&mut buf)?;
    let path = dir.join(file);
    std::fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))
}
