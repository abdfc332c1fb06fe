//! The member sandbox where bubblewrap is missing: Landlock rules that the member's process puts
//! on itself (`restrict_and_exec`, from inside the process, before it runs the member's
//! program), inherited by everything it starts. The whole filesystem stays readable and
//! executable except the policy's hidden paths; only its writable paths (and the terminal
//! devices) may be written; TCP connections may go only to the allowed ports; signals do not
//! leave the member's processes. It does not do what bubblewrap's namespaces do: no pid namespace
//! (other processes stay visible in `/proc`, though Landlock forbids ptrace-ing them), nothing
//! hidden under another name (a hard link, a bind mount of a hidden path), no listing of the
//! directories on the way to a hidden path, no limit on UDP or on Unix sockets; and it
//! restricts the calling thread only, never its sibling threads.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

/// What a member's processes may touch, for Landlock.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    /// Paths (dirs or files) the member may read, write, create and delete under.
    pub writable: Vec<PathBuf>,
    /// Paths the member may not even read (secrets: ~/.ssh, ~/.aws, the daemon's data dir…);
    /// each may be missing on disk.
    pub hidden: Vec<PathBuf>,
    /// When Some: the only TCP ports the member may connect to (the daemon's egress proxy);
    /// None leaves TCP alone (ABI < 4).
    pub connect_tcp: Option<Vec<u16>>,
}

/// The first Landlock ABI that enforces the filesystem part: ABI 3 adds `Truncate`, without which
/// a member could empty any file it may only read (`truncate(2)`, `O_TRUNC`).
pub const FS_ABI: i32 = 3;
/// The first ABI that limits TCP connections (`Policy::connect_tcp`).
pub const NET_ABI: i32 = 4;
/// The first ABI that limits `ioctl` on device files.
pub const IOCTL_ABI: i32 = 5;
/// The first ABI that keeps signals inside a domain.
pub const SCOPE_ABI: i32 = 6;

/// The devices every member writes to whatever its policy: `/dev/null`, and its terminal.
const DEVICES: &[&str] = &["/dev/null", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// What was enforced, beyond the filesystem policy (which always is: `restrict_self` fails
/// rather than enforce it in part).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Status {
    /// The running kernel's Landlock ABI.
    pub abi: i32,
    /// `ioctl` on device files is denied outside the writable paths and terminal devices
    /// (ABI ≥ 5); below, device ioctls are left alone.
    pub fs_ioctl: bool,
    /// TCP connections go only to `Policy::connect_tcp` (false when it was None).
    pub net: bool,
    /// Signals reach only the member's own processes (ABI ≥ 6).
    pub scope_signal: bool,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Landlock ABI {}: files", self.abi)?;
        if self.fs_ioctl {
            f.write_str(", device ioctls")?;
        }
        if self.net {
            f.write_str(", TCP connections")?;
        }
        if self.scope_signal {
            f.write_str(", signals")?;
        }
        f.write_str(" restricted")
    }
}

/// Why a member could not be restricted.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The kernel has no usable Landlock (`probe`'s reason).
    #[error("Landlock is not available: {0}")]
    Unavailable(String),
    /// The kernel's ABI is too old for a part of the policy.
    #[error("the kernel's Landlock ABI {abi} cannot enforce {what}: it needs ABI {needs}")]
    Unsupported {
        abi: i32,
        what: &'static str,
        needs: i32,
    },
    /// Landlock is an allow-list: a path cannot be hidden under one the member may write to.
    #[error(
        "{} cannot be hidden: it lies under {}, which the member may write to",
        hidden.display(),
        writable.display()
    )]
    Conflict { hidden: PathBuf, writable: PathBuf },
    /// A path of the policy is relative, unreadable or (a writable one) missing.
    #[error("{}: {source}", path.display())]
    Path { path: PathBuf, source: io::Error },
    /// The kernel refused a step (creating the ruleset, adding a rule, restricting).
    #[error("Landlock: {0}")]
    Kernel(String),
    /// The kernel did not enforce all that was asked (a bug: what is asked follows its ABI).
    #[error("Landlock enforced the policy only in part ({0})")]
    Partial(String),
    /// `restrict_and_exec` was given no program.
    #[error("no program to run")]
    NoProgram,
    /// The program could not be run (the calling thread stays restricted).
    #[error("cannot run {program}: {source}")]
    Exec { program: String, source: io::Error },
}

/// The ABI the running kernel offers, or why Landlock cannot be used.
pub fn probe() -> Result<i32, String> {
    match abi_version() {
        Ok(abi) => Ok(abi),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => {
                "the kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK; a container's seccomp filter may also hide it)".into()
            }
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built into the kernel but not enabled (add landlock to the lsm= boot parameter)".into()
            }
            _ => format!("the kernel does not answer Landlock's version query: {e}"),
        }),
    }
}

#[allow(unsafe_code)]
fn abi_version() -> io::Result<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) reads and writes
    // no memory: it returns the ABI version, or -1 and errno.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(v).map_err(|_| io::Error::other(format!("Landlock ABI {v}")))
}

/// Restricts the calling thread — and every process it starts or execs from now on — to the
/// policy. Other threads of the process are not restricted (run it in the thread that execs, or
/// alone). Fails, rather than apply a part, when the kernel cannot enforce the filesystem part
/// or the TCP limit that the policy asks for; signal scoping and device ioctls are enforced where
/// the kernel can, and `Status` says which were.
pub fn restrict_self(p: &Policy) -> Result<Status, LandlockError> {
    let abi = probe().map_err(LandlockError::Unavailable)?;
    let plan = plan(p, abi)?;
    let grants = grants(p)?;
    let kernel = |e: landlock::RulesetError| LandlockError::Kernel(e.to_string());

    // Everything asked for is a hard requirement: `plan` asks only for what this ABI enforces,
    // so a refusal is a surprise and fails instead of leaving a part unenforced.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(plan.fs)
        .map_err(kernel)?;
    if plan.net {
        // Only connecting is limited: binding a port lets nothing out, and dev servers need it.
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(kernel)?;
    }
    if plan.scope_signal {
        // Not `Scope::AbstractUnixSocket`: it would cut members off abstract sockets that
        // processes outside serve (X11's, the D-Bus session bus on some systems, …), which
        // bubblewrap leaves reachable too (it shares the network namespace). Pathname sockets
        // are not limited either (see `plan`).
        ruleset = ruleset.scope(Scope::Signal).map_err(kernel)?;
    }
    let mut created = ruleset.create().map_err(kernel)?;
    for (path, grant) in &grants {
        let dir = match std::fs::metadata(path) {
            Ok(m) => m.is_dir(),
            Err(e) if e.kind() == io::ErrorKind::NotFound && *grant != Grant::Write => continue,
            Err(e) => return Err(path_error(path, e)),
        };
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(landlock::PathFdError::OpenCall { source, .. })
                if source.kind() == io::ErrorKind::NotFound && *grant != Grant::Write =>
            {
                continue;
            }
            Err(landlock::PathFdError::OpenCall { source, .. }) => {
                return Err(path_error(path, source));
            }
            Err(e) => return Err(path_error(path, io::Error::other(e.to_string()))),
        };
        let mut access = match grant {
            Grant::Read => plan.read,
            Grant::Write | Grant::Device => plan.fs,
        };
        if !dir {
            // A file takes only the rights of files (Landlock refuses the others on it).
            access &= AccessFs::from_file(plan.abi);
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(kernel)?;
    }
    if let Some(ports) = p.connect_tcp.as_deref().filter(|_| plan.net) {
        for &port in ports {
            created = created
                .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                .map_err(kernel)?;
        }
    }
    let done = created.restrict_self().map_err(kernel)?;
    if done.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::Partial(format!("{:?}", done.ruleset)));
    }
    if !done.no_new_privs {
        return Err(LandlockError::Partial("no_new_privs was not set".into()));
    }
    Ok(plan.status)
}

/// Restricts the calling thread to the policy, then runs `argv` in its place (the process image
/// is replaced, so all of it is restricted). Returns only on failure; if the program cannot be
/// run, the thread stays restricted.
pub fn restrict_and_exec(p: &Policy, argv: &[String]) -> Result<Infallible, LandlockError> {
    let (program, args) = argv.split_first().ok_or(LandlockError::NoProgram)?;
    restrict_self(p)?;
    let source = std::process::Command::new(program).args(args).exec();
    Err(LandlockError::Exec {
        program: program.clone(),
        source,
    })
}

/// What `restrict_self` asks of a kernel with Landlock ABI `abi`, decided before any rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    abi: ABI,
    /// The filesystem rights handled: every one this ABI knows (a right left unhandled is
    /// allowed everywhere).
    fs: BitFlags<AccessFs>,
    /// The rights granted where the member may only read.
    read: BitFlags<AccessFs>,
    net: bool,
    scope_signal: bool,
    status: Status,
}

fn plan(p: &Policy, abi: i32) -> Result<Plan, LandlockError> {
    if abi < FS_ABI {
        return Err(LandlockError::Unsupported {
            abi,
            what: "read-only files (truncating them is not controlled)",
            needs: FS_ABI,
        });
    }
    let net = p.connect_tcp.is_some();
    if net && abi < NET_ABI {
        return Err(LandlockError::Unsupported {
            abi,
            what: "a limit on TCP connections",
            needs: NET_ABI,
        });
    }
    let landlock_abi = ABI::from(abi);
    // Every right this ABI knows but `ResolveUnix` (ABI 9: connecting to a pathname Unix
    // socket), left unhandled as on older kernels: a member must reach the daemon's socket in
    // the runtime dir, which may lie in the hidden data dir, and a policy cannot re-open a path
    // under a hidden one for reading only. A right of a later ABI is handled, so denied outside
    // the writable paths until it is thought about.
    let fs = AccessFs::from_all(landlock_abi) & !AccessFs::ResolveUnix;
    let read = fs & (AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir);
    let scope_signal = abi >= SCOPE_ABI;
    Ok(Plan {
        abi: landlock_abi,
        fs,
        read,
        net,
        scope_signal,
        status: Status {
            abi,
            fs_ioctl: fs.contains(AccessFs::IoctlDev),
            net,
            scope_signal,
        },
    })
}

/// What a rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    /// Read and execute.
    Read,
    /// Everything: a writable path of the policy (it must exist).
    Write,
    /// Everything: a device every member writes to (skipped where missing).
    Device,
}

/// The paths that get a rule, resolved (symbolic links followed, as Landlock does).
///
/// Landlock only allows, and a rule covers all beneath its path, so the whole filesystem stays
/// readable through rules on the siblings of the way to each hidden path: from `/` down, a
/// directory with no hidden path below it gets one rule; one with a hidden path below is listed
/// and each of its entries handled the same way; a hidden path gets none. The directories on the
/// way get no rule of their own, which is why they cannot be listed. Symbolic links get no rule:
/// the kernel checks where they lead, which has rules of its own (a rule on the target of
/// `~/link -> ~` would cover `~/.ssh`).
fn grants(p: &Policy) -> Result<Vec<(PathBuf, Grant)>, LandlockError> {
    let hidden = p
        .hidden
        .iter()
        .map(|h| resolve_lenient(h))
        .collect::<Result<Vec<_>, _>>()?;
    let writable = p
        .writable
        .iter()
        .map(|w| {
            absolute(w)?;
            w.canonicalize().map_err(|e| path_error(w, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for w in &writable {
        if let Some(h) = hidden.iter().find(|h| h.starts_with(w)) {
            return Err(LandlockError::Conflict {
                hidden: h.clone(),
                writable: w.clone(),
            });
        }
    }
    let mut out = Vec::new();
    readable(Path::new("/"), &hidden, &mut out)?;
    out.extend(writable.into_iter().map(|w| (w, Grant::Write)));
    for device in DEVICES {
        let Ok(path) = Path::new(device).canonicalize() else {
            continue;
        };
        // Hidden wins: a device on the way to a hidden path, or under one, gets no rule.
        if !hidden
            .iter()
            .any(|h| h.starts_with(&path) || path.starts_with(h))
        {
            out.push((path, Grant::Device));
        }
    }
    Ok(out)
}

/// The read rules for `path` and below, given the hidden paths (resolved).
fn readable(
    path: &Path,
    hidden: &[PathBuf],
    out: &mut Vec<(PathBuf, Grant)>,
) -> Result<(), LandlockError> {
    if hidden.iter().any(|h| h == path) {
        return Ok(());
    }
    if !hidden.iter().any(|h| h.starts_with(path)) {
        out.push((path.to_path_buf(), Grant::Read));
        return Ok(());
    }
    // On the way to a hidden path: its entries one by one.
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(path_error(path, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| path_error(path, e))?;
        let Ok(kind) = entry.file_type() else {
            continue; // gone since it was listed
        };
        if kind.is_symlink() {
            continue;
        }
        readable(&entry.path(), hidden, out)?;
    }
    Ok(())
}

/// `path` with symbolic links resolved as far as it exists (a hidden path may be missing, or
/// lie in a directory that is).
fn resolve_lenient(path: &Path) -> Result<PathBuf, LandlockError> {
    absolute(path)?;
    match path.canonicalize() {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => Ok(resolve_lenient(parent)?.join(name)),
            _ => Err(path_error(path, e)),
        },
        Err(e) => Err(path_error(path, e)),
    }
}

fn absolute(path: &Path) -> Result<(), LandlockError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(path_error(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not an absolute path"),
        ))
    }
}

fn path_error(path: &Path, source: io::Error) -> LandlockError {
    LandlockError::Path {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
