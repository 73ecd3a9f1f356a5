# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_fabprobe_global_optspecs
    string join \n root= format= v/verbose env-from= env-file= nccl-version= h/help V/version
end

function __fish_fabprobe_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_fabprobe_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_fabprobe_using_subcommand
    set -l cmd (__fish_fabprobe_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c fabprobe -n "__fish_fabprobe_needs_command" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_needs_command" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_needs_command" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_needs_command" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_needs_command" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_needs_command" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "check" -d 'Every local probe and the host facts judged against a policy (checks/*.toml): one ranked list of findings with evidence and fixes; exit 0 pass, 1 fail, 2 could not run, 3 nothing to judge'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "gdr" -d 'GPUDirect RDMA readiness per GPU x RDMA NIC pair: path type vs NCCL_NET_GDR_LEVEL, peer memory, DMA-BUF, ACS on the bridges between them, IOMMU, BAR1'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "gids" -d 'Every GID of every RDMA port (index, GID, IPv4, RoCE v1/v2, netdev) and the index NCCL and perftest would pick; --show-gids prints show_gids\' own format'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "links" -d 'RDMA port health like ibstat + ibstatus + perfquery: state, rate, PCIe link, counters with their widths, deltas over --interval or against --baseline'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "qos" -d 'Lossless RoCE per RoCE netdev: PFC/ETS/trust/DCBX (DCB netlink), pause and storm counters (ethtool), ECN/DCQCN, CNPs, the RoCE priority; rates over --interval'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "nccl-env" -d 'What NCCL would choose on this host (sockets, HCAs, GID index, GDR, plugin) with the rule that chose it, where each NCCL_* value came from, and a lint of them'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "nccl-log" -d 'Read NCCL_DEBUG logs (files, a directory or stdin): summary and root-cause verdicts'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "ring" -d 'Ring AllReduce across nodes over RDMA (ibverbs) or TCP: nccl-tests\' table, per-link bandwidth, and verdicts naming the slow link or the hung rank'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "report" -d 'Saved --format json reports of ring, sweep, check and topo as one self-contained HTML page: the scan matrix, busbw against size, the fleet grid, the topology tree'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "snapshot" -d 'Capture what the probes read into one directory or .tar.gz, to analyse elsewhere'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "sweep" -d 'Merge many nodes\' `check --format json` reports: failed nodes by cause, nodes unlike their peers, missing reports, Slurm drain lines'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "topo" -d 'The GPU/NIC topology matrix (nvidia-smi topo -m from sysfs and NVML; --nccl for NCCL\'s view; NCCL topology XML out and in)'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "completions" -d 'Print shell completions for bash, zsh or fish'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "gen-docs" -d 'Write man pages and shell completions (for packaging; used by the tests)'
complete -c fabprobe -n "__fish_fabprobe_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l policy -F -a "default dgx-h100 hdr-a100 roce-dcqcn" -d 'The policy: a built-in name (default, dgx-h100, hdr-a100, roce-dcqcn) or a TOML file' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l show-policy -f -a "default dgx-h100 hdr-a100 roce-dcqcn" -d 'Print the named built-in policy\'s TOML (to copy and edit) and exit' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l interval -d 'Sample the port counters twice, SECONDS apart, so counter rates can be judged (live)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l baseline -d 'An earlier snapshot of the same host: counter rates from it to --root (or live)' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l require -d 'A policy key that must be evaluated (repeatable): one that could not be fails the check instead of being noted in the verdict line, e.g. --require counters.max_per_hour' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l output -d 'Write the result to FILE atomically (a temporary file in FILE\'s directory, renamed over it) and exit 0 once it is written: the verdict is in the file. For textfile collectors: `fabprobe --format prom check --output /var/lib/node_exporter/fabprobe.prom`' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand check" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'Only the pairs whose NIC is this RDMA device (as `gids --device`), e.g. `--device mlx5_0`: every GPU against that NIC' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gdr" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'Only this RDMA device (like `show_gids DEV`)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l output -d 'Write the result to FILE atomically (a temporary file in FILE\'s directory, renamed over it) and exit 0 once it is written: the verdict is in the file. For textfile collectors: `fabprobe --format prom gids --output /var/lib/node_exporter/fabprobe-gids.prom`' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -l show-gids -d 'Print exactly what the show_gids script prints (tabs, its lexical order, footer n_gids_found=N), for scripts that parse it'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gids" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l interval -d 'Sample the counters twice, SECONDS apart, and report deltas and rates (live only)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'Only this RDMA device (as `gids --device`), e.g. `--device mlx5_0`; its ports are still judged against the whole host\'s (a rate below its peers\')' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l baseline -d 'An earlier snapshot of the same host: report deltas from it to --root (or to the live host); rates use the snapshots\' captured_at times' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l output -d 'Write the result to FILE atomically (a temporary file in FILE\'s directory, renamed over it) and exit 0 once it is written: the verdict is in the file. For textfile collectors: `fabprobe --format prom links --output /var/lib/node_exporter/fabprobe-links.prom`' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand links" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l ifname -d 'Only these netdevs (repeatable); any netdev, RDMA or not (live: veth, virtio...)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'Only the netdev of this RDMA device (as `gids --device`), e.g. `--device mlx5_0`' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l interval -d 'Sample the counters twice, SECONDS apart: pauses/s, pause time per second, CNPs/s (live only)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l baseline -d 'An earlier snapshot of the same host: deltas from it to --root (or the live host)' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l lldp-wait -d 'How long --lldp listens: a little over the usual 30 s LLDP interval' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l output -d 'Write the result to FILE atomically (a temporary file in FILE\'s directory, renamed over it) and exit 0 once it is written: the verdict is in the file. For textfile collectors: `fabprobe --format prom qos --output /var/lib/node_exporter/fabprobe-qos.prom`' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -l lldp -d 'Listen for the switch\'s LLDP (chassis, port, system name, 802.1Qaz ETS/PFC/APP) on every reported netdev and compare it with the host (live: needs root; a snapshot replays its recorded frames)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand qos" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-env" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l html -d 'Also draw the report as a self-contained HTML page in OUT.html (replaced atomically), the page `fabprobe report` draws from this run\'s --format json' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand nccl-log" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s b -l minbytes -d 'Smallest message size (K, M, G suffixes: powers of 1024, as nccl-tests)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s e -l maxbytes -d 'Largest message size' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s f -l stepfactor -d 'Multiply the size by this factor between steps' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s n -l iters -d 'Timed iterations per size' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s w -l warmup_iters -d 'Warm-up iterations per size (not timed)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s c -l check -d 'Verify the result of every size (0 turns checking off: #wrong shows N/A)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l channels -d 'Independent rings, each on its own connections (NCCL\'s channels)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l transport -d 'Data-plane transport' -r -f -a "tcp\t'TCP sockets over the interface chosen by --ifname'
rdma\t'ibverbs RC QPs with RDMA Write with immediate, on the port NCCL would use (--device, NCCL_IB_HCA, the data interface\'s port) and NCCL\'s GID index (--gid-index, NCCL_IB_GID_INDEX)'
auto\t'rdma where every rank has a usable RDMA port, else tcp'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l ifname -d 'Data interface, NCCL_SOCKET_IFNAME syntax: prefixes, `^` excludes, `=` exact (default: $NCCL_SOCKET_IFNAME, else NCCL\'s own default order)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'RDMA port for --transport rdma/auto, `mlx5_0` or `mlx5_0:1` (exact name; default: NCCL_IB_HCA rules, then the ACTIVE port whose netdev is the data interface)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l gid-index -d 'GID index for RoCE (default: NCCL_IB_GID_INDEX, else NCCL\'s automatic choice, as `fabprobe gids` shows it)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l timeout -d 'Deadline in seconds for every wait (bootstrap, link setup, each chunk)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l join-timeout -d 'How long ranks may take to join, in seconds (default max(60, --timeout)): launchers start the ranks of a big job seconds apart; a rank that has not joined by then is named as missing' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l token -d 'Job token all ranks must share (default: $FABPROBE_TOKEN, else the launcher\'s job id)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l rank -d 'This rank (default: from the launcher\'s environment)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l world -d 'Number of ranks' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l coordinator -d 'Rank 0\'s host and port (rank 0 listens there)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l scan-time -d 'Time budget of the whole link scan in seconds, confirmation included: an order starts only when it fits. The minimum runs whatever it says: two ring orders (so that a node can be told from a link) and, when there are suspects, 4 orders that confirm them. Links it leaves unmeasured are listed (scan.unmeasured)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l scan-bytes -d 'Bytes each scan sample moves over a link' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l scan-reps -d 'Samples per link per scan order' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l local -d 'Run N ranks on this host (threads of this process) over loopback, or over the interface --ifname names: a self-test' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l rails -d 'Rails per node, one ring per rail (rail k of every node to rail k of the next, all at once): `all` (every RDMA port NCCL would use: --device lists them, e.g. `mlx5_0,mlx5_1`, else NCCL_IB_HCA rules; with --transport tcp every interface --ifname matches), N (the first N), or rail indices (`0,3`; one rail as `3,`). Default: one rail. Every node holds one control connection to rank 0 for all its rails' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l lldp-wait -d 'Before joining, listen this long on each data netdev for the switch\'s LLDP when lldpd\'s table (lldpcli) has no neighbour for it, so verdicts name the switch port at the other end (`node-b eth1 <-> leaf-07 Eth1/12`); needs CAP_NET_RAW. The listen ends at the first frame. 0: lldpd\'s table only' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l html -d 'Also write the report as a self-contained HTML page (rank 0 only): the verdicts, the scan matrix, busbw against size, the hops (fabprobe-report(1))' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l output -d 'Write rank 0\'s report (table or JSON) to FILE instead of stdout, atomically: a temporary file in FILE\'s directory, fsynced, renamed over it, so a reader sees the old file or the whole report, also when a rank dies or a signal ends the run. The exit status stays the verdict\'s. Other ranks write nothing' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l root -d 'The global --root, hidden here: a snapshot has no peers to move bytes to. Its value reaches GlobalArgs (same id), where `run` refuses it by name' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l scan -d 'Run the link scan only (no AllReduce sweep): measure every directed link on its own and name slow links and nodes'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -l no-scan -d 'Skip the link scan that runs before the sweep (with --local it runs only with --scan)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand ring" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l html -d 'Where to write the page (`-` for stdout)' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l title -d 'The page\'s title (default: the reports\' kinds and host)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l group-by -d 'Group a sweep\'s fleet map by a hostname pattern (a regular expression; its first capture group, else the whole match, names the group), e.g. \'^(r\\d+)n\' for racks. Default: rows of 40 nodes in the sweep\'s order (--expect\'s)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand report" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -s o -l output -d 'Where to write: a name ending in .tar.gz or .tgz gives a tarball, anything else an (empty or new) directory' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l lldp-wait -d 'Also listen this many seconds for the switch\'s LLDP on every RoCE netdev (needs root) and keep the frames, for `qos --lldp` on the snapshot' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -l force -d 'Replace an existing FILE.tar.gz (a directory is never emptied)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand snapshot" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l expect -d 'The nodes that should have reported (a Slurm hostlist, e.g. gpu[001-128]); those without a report are listed as missing' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l html -d 'Also write the sweep as a self-contained HTML page: fleet map, node x cause grid, drain list (fabprobe-report(1))' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l policy -F -a "default dgx-h100 hdr-a100 roce-dcqcn" -d 'The policy whose `[sweep] tolerance` table says how far numeric fingerprint values may differ between nodes of one kind (a built-in name or a TOML file; without it the defaults: memory_gib within 1% of its kind\'s median, every other value exact)' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l output -d 'Write the result to FILE atomically (a temporary file in FILE\'s directory, renamed over it) and exit 0 once it is written: the verdict is in the file. For textfile collectors: `fabprobe --format prom sweep reports/ --output /var/lib/node_exporter/fleet.prom` (0 reports read is still an error, exit 2, and writes nothing)' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l drain -d 'Print Slurm `scontrol update NodeName=... State=DRAIN Reason=...` lines for the bad nodes instead of the table (fabprobe never runs them)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -l drain-outliers -d 'Also drain nodes that passed but differ from the majority of their peers (without it they are listed, and exit 1, but never drained)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand sweep" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l nccl-xml -d 'Read the topology from an NCCL topology file (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE) instead of the host; on cloud VMs that file is the truth' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l device -f -a "(ls /sys/class/infiniband 2>/dev/null)" -d 'Only this RDMA device among the NICs (as `gids --device`), e.g. `--device mlx5_0`: every GPU, and that NIC\'s row and column under the label the whole host gives it' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -l nccl -d 'Print NCCL\'s path types (LOC/NVL/NVB/PIX/PXB/PHB/SYS: no NODE, Broadcom switches flattened, ports of one adapter merged) instead of nvidia-smi\'s. Table only: the JSON report always carries both matrices'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand topo" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand completions" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -l root -d 'Read a captured snapshot (directory or .tar.gz) instead of the live host' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -l format -d 'Output format: table and json (every command), nccl-xml (topo), prom (check, gids, links, qos, nccl-env, sweep); a command refuses the others by name' -r -f -a "table\t'Human-readable table (the default)'
json\t'The versioned JSON envelope documented in fabprobe(1)'
nccl-xml\t'NCCL topology XML (topo only), usable as NCCL_TOPO_FILE'
prom\t'Prometheus text exposition (check, gids, links, qos, nccl-env, sweep), for node_exporter\'s textfile collector'"
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -l env-from -d 'Judge NCCL\'s settings in the environment of a running process (a training rank): /proc/PID/environ, readable as root or as the process\'s user. Default: this shell\'s' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -l env-file -d 'Judge NCCL\'s settings in a job\'s environment: a file of KEY=VALUE lines (a job script\'s exports, `srun --export` lists), instead of this shell\'s' -r -F
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -l nccl-version -d 'Apply this NCCL version\'s rules (X.Y or X.Y.Z) instead of the libnccl.so.2.X.Y found on the job\'s library path' -r
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -s v -l verbose -d 'Log progress to stderr (repeat for more)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand gen-docs" -s V -l version -d 'Print version'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "check" -d 'Every local probe and the host facts judged against a policy (checks/*.toml): one ranked list of findings with evidence and fixes; exit 0 pass, 1 fail, 2 could not run, 3 nothing to judge'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "gdr" -d 'GPUDirect RDMA readiness per GPU x RDMA NIC pair: path type vs NCCL_NET_GDR_LEVEL, peer memory, DMA-BUF, ACS on the bridges between them, IOMMU, BAR1'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "gids" -d 'Every GID of every RDMA port (index, GID, IPv4, RoCE v1/v2, netdev) and the index NCCL and perftest would pick; --show-gids prints show_gids\' own format'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "links" -d 'RDMA port health like ibstat + ibstatus + perfquery: state, rate, PCIe link, counters with their widths, deltas over --interval or against --baseline'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "qos" -d 'Lossless RoCE per RoCE netdev: PFC/ETS/trust/DCBX (DCB netlink), pause and storm counters (ethtool), ECN/DCQCN, CNPs, the RoCE priority; rates over --interval'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "nccl-env" -d 'What NCCL would choose on this host (sockets, HCAs, GID index, GDR, plugin) with the rule that chose it, where each NCCL_* value came from, and a lint of them'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "nccl-log" -d 'Read NCCL_DEBUG logs (files, a directory or stdin): summary and root-cause verdicts'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "ring" -d 'Ring AllReduce across nodes over RDMA (ibverbs) or TCP: nccl-tests\' table, per-link bandwidth, and verdicts naming the slow link or the hung rank'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "report" -d 'Saved --format json reports of ring, sweep, check and topo as one self-contained HTML page: the scan matrix, busbw against size, the fleet grid, the topology tree'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "snapshot" -d 'Capture what the probes read into one directory or .tar.gz, to analyse elsewhere'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "sweep" -d 'Merge many nodes\' `check --format json` reports: failed nodes by cause, nodes unlike their peers, missing reports, Slurm drain lines'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "topo" -d 'The GPU/NIC topology matrix (nvidia-smi topo -m from sysfs and NVML; --nccl for NCCL\'s view; NCCL topology XML out and in)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "completions" -d 'Print shell completions for bash, zsh or fish'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "gen-docs" -d 'Write man pages and shell completions (for packaging; used by the tests)'
complete -c fabprobe -n "__fish_fabprobe_using_subcommand help; and not __fish_seen_subcommand_from check gdr gids links qos nccl-env nccl-log ring report snapshot sweep topo completions gen-docs help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
