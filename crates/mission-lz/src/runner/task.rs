//! GA4GH TES tasks on a process landing zone: a task's executors run one after another, each in
//! its own image with Podman, as its job's user, in its job's cgroup, and see the same files.
//!
//! - **Layout** ([`Layout`]): each input is staged in the work dir (`cache::TASK_INPUTS/{n}`)
//!   and mounted at its path; volumes, the directories outputs are written in and those of the
//!   executors' `stdin`/`stdout`/`stderr` files are directories of the work dir
//!   (`TASK_DIRS/{k}`) mounted at theirs, one mount for a directory and everything under it.
//!   Every executor gets the same mounts, so what one writes the next reads.
//! - **Running** ([`run`]): an executor's output goes to the job's logs, and also to its
//!   `stdout`/`stderr` file where it names one; the last [`TAIL_BYTES`] of each are its log's.
//!   The first executor that fails ends the task, unless it says `ignore_error`.
//! - **Outputs** ([`outputs`]): once the executors ended, each output's files are found through
//!   the layout (a file, a directory's files, or a glob's matches with `path_prefix` cut off)
//!   for the agent to upload.
//! - **The agent never follows a link an executor made.** Executors write the task's
//!   directories as the job's user, and a link there may point anywhere on the host, which the
//!   agent (as root) opens files for: the executors' `stdin`/`stdout`/`stderr` files and the
//!   outputs are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` under their
//!   mount's directory ([`open_beneath`]), and directories are walked without following links.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mission_api::tes::{TaskAssignment, TesExecutorLog, TesFileType, TesOutput};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cache::TASK_INPUTS;
use crate::podman::{ContainerRun, TaskContainer};

/// Where a task's directories are in its work dir, besides its inputs.
pub(crate) const TASK_DIRS: &str = ".tes/dirs";

/// How much of the end of an executor's stdout and stderr its log keeps.
pub(crate) const TAIL_BYTES: usize = 64 << 10;

/// The mounts of a task's containers, the same for every executor: `(host path relative to the
/// work dir, path inside the container)`, parents before what is mounted inside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub mounts: Vec<(PathBuf, String)>,
}

impl Layout {
    /// Where `task`'s files are: its inputs where they are staged, the directories its volumes,
    /// outputs and executors' files need under [`TASK_DIRS`]. A directory inside another one
    /// (or inside a directory input) is not mounted again.
    pub fn of(task: &TaskAssignment) -> Self {
        let mut inputs: Vec<(PathBuf, String, bool)> = task
            .inputs
            .iter()
            .enumerate()
            .map(|(n, input)| {
                let dir = input.kind == TesFileType::Directory;
                (Path::new(TASK_INPUTS).join(n.to_string()), clean(&input.path), dir)
            })
            .collect();
        let mut wanted: Vec<String> = task.volumes.iter().map(|v| clean(v)).collect();
        wanted.extend(task.outputs.iter().map(output_dir));
        for executor in &task.executors {
            let files = [&executor.executor.stdin, &executor.executor.stdout, &executor.executor.stderr];
            wanted.extend(files.into_iter().flatten().map(|file| parent(&clean(file))));
        }
        wanted.retain(|dir| dir != "/");
        wanted.sort_by_key(|dir| depth(dir));
        let mut dirs: Vec<String> = Vec::new();
        for dir in wanted {
            let covered = dirs.iter().any(|kept| within(&dir, kept))
                || inputs.iter().any(|(_, at, is_dir)| *is_dir && within(&dir, at));
            if !covered {
                dirs.push(dir);
            }
        }
        let mut mounts: Vec<(PathBuf, String)> =
            dirs.into_iter().enumerate().map(|(k, dir)| (Path::new(TASK_DIRS).join(k.to_string()), dir)).collect();
        mounts.extend(inputs.drain(..).map(|(host, at, _)| (host, at)));
        mounts.sort_by_key(|(_, at)| depth(at));
        Self { mounts }
    }

    /// The directories of the work dir `root` the layout mounts that are not inputs: made, empty,
    /// before the first executor runs.
    pub fn dirs(&self, root: &Path) -> Vec<PathBuf> {
        let dirs = self.mounts.iter().filter(|(host, _)| host.starts_with(TASK_DIRS));
        dirs.map(|(host, _)| root.join(host)).collect()
    }

    /// Where `inside` (a path inside the containers) is in the work dir `root`: under the
    /// deepest mount that holds it; `None` where none does.
    pub fn place(&self, root: &Path, inside: &str) -> Option<HostPlace> {
        let inside = clean(inside);
        let (host, at) = self.mounts.iter().filter(|(_, at)| within(&inside, at)).max_by_key(|(_, at)| depth(at))?;
        let rest = inside[at.len()..].trim_start_matches('/');
        Some(HostPlace { base: root.join(host), rest: PathBuf::from(rest) })
    }

    /// The mounts with their host paths in the work dir `root`, as Podman takes them.
    pub fn absolute(&self, root: &Path) -> Vec<(PathBuf, String)> {
        self.mounts.iter().map(|(host, at)| (root.join(host), at.clone())).collect()
    }
}

/// Where a path inside the containers is on the host: the directory (or file) a mount shows
/// there, and the rest of the path under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPlace {
    pub base: PathBuf,
    pub rest: PathBuf,
}

impl HostPlace {
    /// The place `name` under this one.
    fn child(&self, name: &str) -> Self {
        Self { base: self.base.clone(), rest: self.rest.join(name) }
    }
}

/// Opens `place` with `flags`, following no symbolic link from its mount's directory on (see
/// the module docs); a new file is made `0644`.
pub(crate) fn open_beneath(place: &HostPlace, flags: rustix::fs::OFlags) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    // openat2 takes a mode only with O_CREAT.
    let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o644) } else { Mode::empty() };
    let fd = if place.rest.as_os_str().is_empty() {
        rustix::fs::open(&place.base, flags, mode)?
    } else {
        let base = rustix::fs::open(
            &place.base,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        rustix::fs::openat2(&base, &place.rest, flags, mode, resolve)?
    };
    Ok(std::fs::File::from(fd))
}

/// What `place` is, where no link lies on the way to it from its mount's directory (nor is it
/// one): `None` where it is missing or one does.
fn kind_of(place: &HostPlace) -> Option<std::fs::FileType> {
    let mut path = place.base.clone();
    let mut kind = std::fs::symlink_metadata(&path).ok()?.file_type();
    for component in place.rest.components() {
        if !kind.is_dir() {
            return None;
        }
        path.push(component);
        kind = std::fs::symlink_metadata(&path).ok()?.file_type();
    }
    (!kind.is_symlink()).then_some(kind)
}

/// `path` without a trailing `/` or empty and `.` segments (the server refused `..`).
fn clean(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
    format!("/{}", segments.join("/"))
}

/// The directory `path` is in.
fn parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => path[..i].to_owned(),
    }
}

fn depth(path: &str) -> usize {
    path.split('/').filter(|s| !s.is_empty()).count()
}

/// Whether `path` is `dir` or under it.
fn within(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// The directory an output is written in: a directory output's own, a glob's part before its
/// first wildcard, a file's parent.
fn output_dir(output: &TesOutput) -> String {
    let path = clean(&output.path);
    if is_glob(&path) {
        let fixed: Vec<&str> = path.split('/').take_while(|segment| !is_glob(segment)).collect();
        return clean(&fixed.join("/"));
    }
    if output.kind == Some(TesFileType::Directory) { path } else { parent(&path) }
}

fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// One file an output uploads: the output's index, its path under a directory output's URL
/// (empty for a file output), where it is in the work dir and its path inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputFile {
    pub n: usize,
    pub under: String,
    pub place: HostPlace,
    pub inside: String,
}

/// The files `task`'s outputs upload, found in the work dir `root` through `layout`; an output
/// that is not there is named. Blocking.
pub(crate) fn outputs(task: &TaskAssignment, layout: &Layout, root: &Path) -> Result<Vec<OutputFile>, String> {
    let mut files = Vec::new();
    for (n, output) in task.outputs.iter().enumerate() {
        let path = clean(&output.path);
        if is_glob(&path) {
            let prefix = clean(output.path_prefix.as_deref().unwrap_or("/"));
            for inside in glob(layout, root, &path) {
                let place = layout.place(root, &inside).expect("found through the layout");
                for (under_match, place) in files_of(&place) {
                    let inside =
                        if under_match.is_empty() { inside.clone() } else { format!("{inside}/{under_match}") };
                    let under = inside.strip_prefix(&prefix).unwrap_or(&inside).trim_start_matches('/').to_owned();
                    files.push(OutputFile { n, under, place, inside });
                }
            }
            continue;
        }
        let place = layout.place(root, &path).ok_or_else(|| format!("output {path} is in no mounted directory"))?;
        match kind_of(&place) {
            Some(kind) if kind.is_dir() => {
                for (under, place) in files_of(&place) {
                    let inside = format!("{path}/{under}");
                    files.push(OutputFile { n, under, place, inside });
                }
            }
            Some(kind) if kind.is_file() && output.kind != Some(TesFileType::Directory) => {
                files.push(OutputFile { n, under: String::new(), place, inside: path });
            }
            Some(_) => {
                return Err(format!(
                    "output {path} is not a {}",
                    if output.kind == Some(TesFileType::Directory) { "directory" } else { "file" }
                ));
            }
            None => return Err(format!("output {path} was not written")),
        }
    }
    Ok(files)
}

/// The regular files at `place` (itself, if it is one), with their paths under it, in order;
/// links are not followed (an executor's link could point anywhere on the host).
fn files_of(place: &HostPlace) -> Vec<(String, HostPlace)> {
    let mut found = Vec::new();
    match kind_of(place) {
        Some(kind) if kind.is_file() => return vec![(String::new(), place.clone())],
        Some(kind) if kind.is_dir() => {}
        _ => return found,
    }
    let mut stack = vec![(String::new(), place.clone())];
    while let Some((under, dir)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dir.base.join(&dir.rest)) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let under = if under.is_empty() { name.clone() } else { format!("{under}/{name}") };
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => stack.push((under, dir.child(&name))),
                Ok(kind) if kind.is_file() => found.push((under, dir.child(&name))),
                _ => {}
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The paths inside the container that `pattern` (absolute, POSIX wildcards in any segment)
/// matches, looked up through `layout` in the work dir `root` without following links.
fn glob(layout: &Layout, root: &Path, pattern: &str) -> Vec<String> {
    let mut matched = vec![String::new()];
    for segment in pattern.split('/').filter(|s| !s.is_empty()) {
        let mut next = Vec::new();
        for dir in matched {
            if !is_glob(segment) {
                next.push(format!("{dir}/{segment}"));
                continue;
            }
            let inside = if dir.is_empty() { "/".to_owned() } else { dir.clone() };
            let Some(place) = layout.place(root, &inside) else { continue };
            if !kind_of(&place).is_some_and(|kind| kind.is_dir()) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(place.base.join(&place.rest)) else { continue };
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                // A leading dot is matched only by a pattern that starts with one.
                let hidden = name.starts_with('.') && !segment.starts_with('.');
                if !hidden && fnmatch(segment.as_bytes(), name.as_bytes()) {
                    next.push(format!("{dir}/{name}"));
                }
            }
        }
        matched = next;
    }
    let mut found: Vec<String> = matched
        .into_iter()
        .filter(|inside| layout.place(root, inside).is_some_and(|place| kind_of(&place).is_some()))
        .collect();
    found.sort();
    found
}

/// Whether `name` matches the shell pattern `pattern`: `*`, `?`, and bracket expressions
/// (`[abc]`, `[a-z]`, `[!x]`), as POSIX globs match one path segment.
fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| fnmatch(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && fnmatch(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some((&first, tail)) = name.split_first() else { return false };
            let negated = matches!(rest.first(), Some(b'!' | b'^'));
            let set = if negated { &rest[1..] } else { rest };
            // A `]` first in the set is a member.
            let Some(close) = set.iter().skip(1).position(|&b| b == b']').map(|i| i + 1) else {
                return first == b'[' && fnmatch(rest, tail);
            };
            let members = &set[..close];
            let mut hit = false;
            let mut i = 0;
            while i < members.len() {
                if i + 2 < members.len() && members[i + 1] == b'-' {
                    hit |= (members[i]..=members[i + 2]).contains(&first);
                    i += 3;
                } else {
                    hit |= members[i] == first;
                    i += 1;
                }
            }
            hit != negated && fnmatch(&set[close + 1..], tail)
        }
        Some((&literal, rest)) => name.first() == Some(&literal) && fnmatch(rest, &name[1..]),
    }
}

/// What a task's run needs besides its executors: Podman, the images they run in (by id, as
/// loaded), the container settings common to every executor, and the job's output pipes.
pub(crate) struct TaskRun {
    pub runner: Arc<super::process::ProcessRunner>,
    /// The name of its containers, each executor's with its index added.
    pub container: String,
    /// The work dir.
    pub root: PathBuf,
    pub layout: Layout,
    pub task: TaskAssignment,
    /// Each executor's image, as Podman runs it.
    pub images: Vec<String>,
    pub user: (u32, u32),
    pub env: Vec<(&'static str, std::ffi::OsString)>,
    pub cgroup_parent: Option<String>,
    pub network: mission_api::ContainerNetwork,
    pub cpus: Option<u32>,
    pub gpus: Vec<u32>,
}

/// A task's run as its job handle follows it: the container running now (what a stop removes),
/// and whether a stop came (no further executor starts).
#[derive(Debug, Default)]
pub(crate) struct Running {
    pub container: Mutex<Option<String>>,
    pub stopped: AtomicBool,
}

/// How a task's run ended: each executor's log, as far as they ran, and the index of the one that
/// failed the task, if one did.
#[derive(Debug, Default)]
pub(crate) struct TaskEnd {
    pub logs: Vec<TesExecutorLog>,
    pub failed: Option<usize>,
}

/// Runs `run`'s executors one after another, as [`Running`] lets them, their output into the
/// write ends `out` of the job's stdout and stderr pipes.
pub(crate) async fn run(run: TaskRun, out: [OwnedFd; 2], running: Arc<Running>) -> TaskEnd {
    let mounts = run.layout.absolute(&run.root);
    let [stdout, stderr] = out;
    let mut job_out =
        [tokio::fs::File::from(std::fs::File::from(stdout)), tokio::fs::File::from(std::fs::File::from(stderr))];
    let mut end = TaskEnd::default();
    for (i, (step, image)) in run.task.executors.iter().zip(&run.images).enumerate() {
        if running.stopped.load(Ordering::SeqCst) {
            break;
        }
        let executor = &step.executor;
        let mut env: Vec<(&str, std::ffi::OsString)> = run.env.iter().map(|(k, v)| (*k, v.clone())).collect();
        env.extend(executor.env.iter().flatten().map(|(name, value)| (name.as_str(), value.into())));
        let name = format!("{}-{i}", run.container);
        let container = ContainerRun {
            name: name.clone(),
            image,
            work_dir: &run.root,
            user: run.user,
            env,
            cgroup_parent: run.cgroup_parent.clone(),
            network: run.network,
            cpus: run.cpus,
            gpus: &run.gpus,
            command: &executor.command,
            task: Some(TaskContainer {
                mounts: &mounts,
                workdir: executor.workdir.as_deref(),
                stdin: executor.stdin.is_some(),
            }),
        };
        let started_at = chrono::Utc::now();
        *running.container.lock().expect("not poisoned") = Some(name);
        let log = execute(&run, &container, executor, &mut job_out).await;
        *running.container.lock().expect("not poisoned") = None;
        let exit_code = log.as_ref().map_or(-1, |(code, _, _)| *code);
        let (stdout, stderr) = match &log {
            Ok((_, out, err)) => (Some(out.clone()), Some(err.clone())),
            Err(why) => (None, Some(why.to_string())),
        };
        end.logs.push(TesExecutorLog {
            start_time: Some(started_at.to_rfc3339()),
            end_time: Some(chrono::Utc::now().to_rfc3339()),
            stdout,
            stderr,
            exit_code,
        });
        if exit_code != 0 && !executor.ignore_error.unwrap_or(false) {
            end.failed = Some(i);
            break;
        }
    }
    end
}

/// Why an executor could not be run to its end.
#[derive(Debug, thiserror::Error)]
enum ExecutorError {
    /// Its `stdin` is in none of the task's mounts.
    #[error("stdin {0}: not mounted")]
    StdinNotMounted(String),
    /// Its `stdin` cannot be opened (within its mount, following no link).
    #[error("stdin {path}: {source}")]
    Stdin {
        /// The path inside the container.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// This landing zone has no Podman.
    #[error("no Podman here")]
    NoPodman,
    /// Podman could not be started.
    #[error("could not start podman: {0}")]
    Start(std::io::Error),
    /// Podman's end could not be awaited.
    #[error("waiting for podman: {0}")]
    Wait(std::io::Error),
}

/// Runs one executor to its end: its exit code and the tails of its stdout and stderr, or why it
/// could not start.
async fn execute(
    run: &TaskRun,
    container: &ContainerRun<'_>,
    executor: &mission_api::tes::TesExecutor,
    job_out: &mut [tokio::fs::File; 2],
) -> Result<(i32, String, String), ExecutorError> {
    use rustix::fs::OFlags;
    let stdin = match &executor.stdin {
        Some(path) => {
            let place =
                run.layout.place(&run.root, path).ok_or_else(|| ExecutorError::StdinNotMounted(path.clone()))?;
            let opened = open_beneath(&place, OFlags::RDONLY);
            Stdio::from(opened.map_err(|source| ExecutorError::Stdin { path: path.clone(), source })?)
        }
        None => Stdio::null(),
    };
    let mut command = tokio::process::Command::new("podman");
    let podman = run.runner.podman().ok_or(ExecutorError::NoPodman)?;
    command.args(podman.run_command(container)).env_clear().process_group(0).kill_on_drop(false);
    command.envs(["PATH", "HOME"].into_iter().filter_map(|name| Some((name, std::env::var_os(name)?))));
    command.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(ExecutorError::Start)?;
    let files = [&executor.stdout, &executor.stderr].map(|path| {
        let place = path.as_ref().and_then(|path| run.layout.place(&run.root, path))?;
        let file = open_beneath(&place, OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC).ok()?;
        Some(tokio::fs::File::from(file))
    });
    let [out_file, err_file] = files;
    let [job_stdout, job_stderr] = job_out;
    let (out, err) =
        tokio::join!(tee(child.stdout.take(), job_stdout, out_file), tee(child.stderr.take(), job_stderr, err_file),);
    let status = child.wait().await.map_err(ExecutorError::Wait)?;
    use std::os::unix::process::ExitStatusExt;
    let code = status.code().or_else(|| status.signal().map(|signal| 128 + signal)).unwrap_or(-1);
    Ok((code, out, err))
}

/// Copies `from` to the job's log `to` and to `file` (if any) until it ends; answers its last
/// [`TAIL_BYTES`], as text.
async fn tee(
    from: Option<impl tokio::io::AsyncRead + Unpin>,
    to: &mut tokio::fs::File,
    mut file: Option<tokio::fs::File>,
) -> String {
    let Some(mut from) = from else { return String::new() };
    let mut tail: Vec<u8> = Vec::new();
    let mut buffer = vec![0; 64 << 10];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let chunk = &buffer[..read];
        let _ = to.write_all(chunk).await;
        if let Some(file) = file.as_mut() {
            let _ = file.write_all(chunk).await;
        }
        tail.extend_from_slice(chunk);
        if tail.len() > 2 * TAIL_BYTES {
            tail.drain(..tail.len() - TAIL_BYTES);
        }
    }
    if tail.len() > TAIL_BYTES {
        tail.drain(..tail.len() - TAIL_BYTES);
    }
    String::from_utf8_lossy(&tail).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mission_api::JobImage;
    use mission_api::tes::{InputSource, TaskExecutor, TaskInput, TesExecutor};

    fn executor(stdout: Option<&str>) -> TaskExecutor {
        TaskExecutor {
            executor: TesExecutor {
                image: "alpine".into(),
                command: vec!["true".into()],
                stdout: stdout.map(str::to_owned),
                ..Default::default()
            },
            image: JobImage { image_id: uuid::Uuid::nil(), digest: "sha256:00".into(), reference: None },
        }
    }

    fn input(path: &str, kind: TesFileType) -> TaskInput {
        TaskInput { path: path.into(), kind, source: InputSource::Content { text: String::new() } }
    }

    fn output(path: &str, kind: Option<TesFileType>) -> TesOutput {
        TesOutput { url: "s3://b/k".into(), path: path.into(), kind, ..Default::default() }
    }

    #[test]
    fn a_task_mounts_its_inputs_and_the_directories_its_files_are_written_in_once_each() {
        let task = TaskAssignment {
            inputs: vec![input("/data/in.txt", TesFileType::File), input("/ref", TesFileType::Directory)],
            executors: vec![executor(Some("/logs/out.txt")), executor(Some("/data/x/y.txt"))],
            volumes: vec!["/data".into(), "/data/sub/".into()],
            outputs: vec![
                output("/data/result.txt", None),
                output("/ref/made.txt", None),
                output("/results/*.csv", None),
                output("/tree", Some(TesFileType::Directory)),
            ],
        };
        let layout = Layout::of(&task);
        let at: Vec<(&str, &str)> =
            layout.mounts.iter().map(|(host, at)| (host.to_str().unwrap(), at.as_str())).collect();
        assert_eq!(
            at,
            [
                (".tes/dirs/0", "/data"),
                (".tes/dirs/1", "/results"),
                (".tes/dirs/2", "/tree"),
                (".tes/dirs/3", "/logs"),
                (".tes/inputs/1", "/ref"),
                (".tes/inputs/0", "/data/in.txt"),
            ]
        );
        let root = Path::new("/w");
        let place = |base: &str, rest: &str| Some(HostPlace { base: base.into(), rest: rest.into() });
        assert_eq!(layout.place(root, "/data/sub/f"), place("/w/.tes/dirs/0", "sub/f"));
        assert_eq!(layout.place(root, "/data/in.txt"), place("/w/.tes/inputs/0", ""));
        assert_eq!(layout.place(root, "/ref/made.txt"), place("/w/.tes/inputs/1", "made.txt"));
        assert_eq!(layout.place(root, "/elsewhere/f"), None);
        assert_eq!(layout.dirs(root).len(), 4);
    }

    #[test]
    fn outputs_are_found_as_files_directories_and_glob_matches() {
        let work = tempfile::tempdir().unwrap();
        let root = work.path();
        let task = TaskAssignment {
            executors: vec![executor(None)],
            outputs: vec![
                output("/out/one.txt", None),
                output("/out/dir", Some(TesFileType::Directory)),
                TesOutput { path_prefix: Some("/out/".into()), ..output("/out/*.csv", None) },
                output("/out/missing.txt", None),
            ],
            ..Default::default()
        };
        let layout = Layout::of(&task);
        let out = root.join(TASK_DIRS).join("0");
        std::fs::create_dir_all(out.join("dir/deeper")).unwrap();
        for (path, text) in
            [("one.txt", "1"), ("dir/a", "a"), ("dir/deeper/b", "b"), ("x.csv", "x"), ("y.csv", "y"), ("z.txt", "z")]
        {
            std::fs::write(out.join(path), text).unwrap();
        }
        // A link an executor left is never followed, to a file or a directory.
        std::os::unix::fs::symlink("/etc/hostname", out.join("link.csv")).unwrap();
        std::os::unix::fs::symlink("/etc", out.join("dir/etc")).unwrap();
        assert_eq!(outputs(&task, &layout, root), Err("output /out/missing.txt was not written".into()));
        let mut task = task;
        task.outputs.pop();
        let found = outputs(&task, &layout, root).unwrap();
        let a = open_beneath(&found[1].place, rustix::fs::OFlags::RDONLY).unwrap();
        assert_eq!(std::io::read_to_string(a).unwrap(), "a");
        let linked = HostPlace { base: out.clone(), rest: "dir/etc/hostname".into() };
        assert!(open_beneath(&linked, rustix::fs::OFlags::RDONLY).is_err(), "a link on the way is refused");
        let found: Vec<(usize, String, String)> = found.into_iter().map(|f| (f.n, f.under, f.inside)).collect();
        assert_eq!(
            found,
            [
                (0, String::new(), "/out/one.txt".into()),
                (1, "a".into(), "/out/dir/a".into()),
                (1, "deeper/b".into(), "/out/dir/deeper/b".into()),
                (2, "x.csv".into(), "/out/x.csv".into()),
                (2, "y.csv".into(), "/out/y.csv".into()),
            ]
        );
    }

    #[test]
    fn shell_patterns_match_as_posix_globs_do() {
        for (pattern, name, hit) in [
            ("*.txt", "a.txt", true),
            ("*.txt", "a.csv", false),
            ("?.txt", "ab.txt", false),
            ("[ab]*", "b1", true),
            ("[!ab]*", "b1", false),
            ("[a-c]x", "bx", true),
            ("[]]", "]", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
        ] {
            assert_eq!(fnmatch(pattern.as_bytes(), name.as_bytes()), hit, "{pattern} ~ {name}");
        }
    }
}
