//! Work dirs, reused from job to job.
//!
//! A job runs in a work dir holding copies of its mission's files. Making a dir and its files
//! for every job, and removing them after, costs inodes, and on ext4 without a journal every new
//! inode is sought past those freed in the last half minute: a stream of short jobs slowed
//! itself down that way. So the work dir of an ended job is emptied of everything but its copies
//! of the inputs (regular files, [`KEEP_MAX_BYTES`] in all at most) and waits for the next job,
//! which rewrites those copies in place (the same inodes) and adds or removes the files its
//! inputs differ in. Whatever the last job did to its copies, the next one gets the cache's
//! content and mode.
//!
//! Dirs are named at random under the agent's work root, which lies outside any data dir; the
//! agent empties it when it starts, and removes its idle dirs when it ends. A dir is private to
//! its job: mode 0700, and it and the input copies belong to the job's user while the job runs.
//! An idle dir belongs to the agent (so no job's user can enter it), and waits only for the next
//! job of the same mission user: work dirs and input copies never pass from one user to another.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use uuid::Uuid;

/// Most bytes of input copies an idle work dir keeps; a dir holding more is removed.
pub const KEEP_MAX_BYTES: u64 = 8 << 20;
/// Most work dirs kept idle.
const MAX_IDLE: usize = 64;

/// Input copies of a work dir: path → (size, modification time) when staged, to tell the files
/// a job changed.
pub type Staged = HashMap<PathBuf, (u64, SystemTime)>;

/// The work dirs of one agent.
pub struct WorkDirs {
    root: PathBuf,
    /// Idle dirs by the mission user whose jobs used them.
    idle: Mutex<HashMap<Uuid, Vec<WorkDir>>>,
}

/// One job's work dir.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    inputs: Staged,
    /// The mission user whose jobs use it.
    user: Uuid,
}

impl WorkDirs {
    /// Work dirs under `root` (which exists).
    /// Megabytes free to unprivileged users on the filesystem the work dirs are on, where it
    /// can be read.
    pub fn free_mb(&self) -> Option<u64> {
        let stats = rustix::fs::statvfs(&self.root).ok()?;
        Some(stats.f_bavail.saturating_mul(stats.f_frsize) / 1_000_000)
    }

    pub fn new(root: PathBuf) -> Self {
        Self { root, idle: Mutex::new(HashMap::new()) }
    }

    /// A work dir for a job of mission user `user`, holding copies of `inputs` (path relative to
    /// the work dir, file to copy) and belonging to `owner` (uid, gid; the agent's own user when
    /// `None`): an idle dir of the same user restaged, or a new one. Blocking.
    pub fn stage(
        &self,
        user: Uuid,
        owner: Option<(u32, u32)>,
        inputs: &[(PathBuf, PathBuf)],
    ) -> std::io::Result<WorkDir> {
        let reused = self.idle.lock().expect("not poisoned").get_mut(&user).and_then(Vec::pop);
        if let Some(mut dir) = reused {
            if dir.restage(inputs).and_then(|()| dir.hand_to(owner)).is_ok() {
                return Ok(dir);
            }
            // Whatever the last job left in the way, a new dir does not have it.
            dir.remove();
        }
        let mut dir =
            WorkDir { path: self.root.join(Uuid::new_v4().simple().to_string()), inputs: Staged::new(), user };
        std::fs::DirBuilder::new().mode(0o700).create(&dir.path)?;
        match dir.restage(inputs).and_then(|()| dir.hand_to(owner)) {
            Ok(()) => Ok(dir),
            Err(e) => {
                dir.remove();
                Err(e)
            }
        }
    }

    /// Takes back the work dir of an ended job (whose processes are gone): everything but its
    /// input copies is removed, and it waits, the agent's again, for the next job of the same
    /// user, or it is removed whole. Blocking.
    pub fn give_back(&self, mut dir: WorkDir) {
        let agent = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        let kept = dir
            .clean()
            .and_then(|kept| std::os::unix::fs::lchown(&dir.path, Some(agent.0), Some(agent.1)).map(|()| kept));
        if kept.is_ok_and(|kept| kept <= KEEP_MAX_BYTES) {
            let mut idle = self.idle.lock().expect("not poisoned");
            if idle.values().map(Vec::len).sum::<usize>() < MAX_IDLE {
                idle.entry(dir.user).or_default().push(dir);
                return;
            }
        }
        dir.remove();
    }
}

impl Drop for WorkDirs {
    fn drop(&mut self) {
        for (_, dirs) in self.idle.get_mut().expect("not poisoned").drain() {
            for dir in dirs {
                dir.remove();
            }
        }
    }
}

impl WorkDir {
    /// A new dir at `path` (mode 0700; its parent exists) holding copies of `inputs` (path
    /// relative to the dir, file to copy), for a runner whose dirs are named by their jobs and
    /// outlive the agent (on a cluster's shared filesystem); answers what it staged. Blocking.
    pub fn create_at(path: PathBuf, inputs: &[(PathBuf, PathBuf)]) -> std::io::Result<Staged> {
        let mut dir = WorkDir { path, inputs: Staged::new(), user: Uuid::nil() };
        std::fs::DirBuilder::new().mode(0o700).create(&dir.path)?;
        dir.restage(inputs)?;
        Ok(dir.inputs)
    }

    /// Where the job runs.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The input copies, as staged.
    pub fn inputs(&self) -> &Staged {
        &self.inputs
    }

    /// Makes the dir hold copies of `inputs`: copies it keeps from the last job are rewritten in
    /// place, those no longer wanted removed, new ones made.
    fn restage(&mut self, inputs: &[(PathBuf, PathBuf)]) -> std::io::Result<()> {
        let wanted: HashSet<PathBuf> = inputs.iter().map(|(relative, _)| self.path.join(relative)).collect();
        let kept = std::mem::take(&mut self.inputs);
        for old in kept.keys().filter(|old| !wanted.contains(*old)) {
            std::fs::remove_file(old)?;
        }
        for (relative, source) in inputs {
            let target = self.path.join(relative);
            let meta = if kept.contains_key(&target) { rewrite(&target, source)? } else { create(&target, source)? };
            self.inputs.insert(target, (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
        }
        Ok(())
    }

    /// Makes the dir, the dirs on the way to its input copies and the copies belong to `owner`
    /// (when the job runs as a user of its own). Links are never followed.
    fn hand_to(&self, owner: Option<(u32, u32)>) -> std::io::Result<()> {
        let Some((uid, gid)) = owner else { return Ok(()) };
        let mut paths: HashSet<&Path> = HashSet::from([self.path.as_path()]);
        for input in self.inputs.keys() {
            paths.extend(input.ancestors().take_while(|p| *p != self.path));
        }
        for path in paths {
            std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Removes everything but the input copies that are still regular files (and the dirs on
    /// their way); answers their size in all. Symbolic links are removed, never followed.
    fn clean(&mut self) -> std::io::Result<u64> {
        let mut on_the_way = HashSet::new();
        for input in self.inputs.keys() {
            for dir in input.ancestors().skip(1).take_while(|dir| *dir != self.path) {
                on_the_way.insert(dir.to_path_buf());
            }
        }
        let mut kept = Staged::new();
        let mut bytes = 0;
        let mut dirs = vec![self.path.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let (path, kind) = (entry.path(), entry.file_type()?);
                if kind.is_dir() && on_the_way.contains(&path) {
                    dirs.push(path);
                } else if let Some(staged) = self.inputs.get(&path).filter(|_| kind.is_file()) {
                    bytes += entry.metadata()?.len();
                    kept.insert(path, *staged);
                } else if kind.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
        self.inputs = kept;
        Ok(bytes)
    }

    fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A new copy of `source` at `target`, with its mode.
fn create(target: &Path, source: &Path) -> std::io::Result<std::fs::Metadata> {
    if let Some(parent) = target.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    fill(&mut OpenOptions::new().read(true).write(true).create_new(true).open(target)?, source)
}

/// `source`'s content and mode over the copy at `target`, in place; a copy that is no longer a
/// plain file of its own (a link, or a file with other names) is made anew.
fn rewrite(target: &Path, source: &Path) -> std::io::Result<std::fs::Metadata> {
    let opened =
        OpenOptions::new().read(true).write(true).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32).open(target);
    match opened {
        Ok(mut file) if file.metadata().is_ok_and(|m| m.is_file() && m.nlink() == 1) => fill(&mut file, source),
        _ => {
            std::fs::remove_file(target)?;
            create(target, source)
        }
    }
}

/// Makes `out` hold `source`'s content and mode. A copy that already does is left as it is: on
/// ext4, truncating a file and writing it again makes its close write the blocks out at once.
fn fill(out: &mut File, source: &Path) -> std::io::Result<std::fs::Metadata> {
    let mut from = File::open(source)?;
    let (want, have) = (from.metadata()?, out.metadata()?);
    let same = want.len() == have.len() && want.len() <= KEEP_MAX_BYTES && {
        let (mut theirs, mut ours) = (Vec::new(), Vec::new());
        from.read_to_end(&mut theirs)?;
        out.read_to_end(&mut ours)?;
        from.rewind()?;
        theirs == ours
    };
    if !same {
        out.rewind()?;
        let written = std::io::copy(&mut from, out)?;
        if have.len() > written {
            out.set_len(written)?;
        }
    }
    if want.permissions() != have.permissions() {
        out.set_permissions(want.permissions())?;
    } else if same {
        return Ok(have);
    }
    out.metadata()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn inputs(cache: &Path, files: &[(&str, &str)]) -> Vec<(PathBuf, PathBuf)> {
        files
            .iter()
            .map(|(path, content)| {
                let source = cache.join(path.replace('/', "_"));
                std::fs::write(&source, content).unwrap();
                (PathBuf::from(path), source)
            })
            .collect()
    }

    fn tree(root: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let kind = entry.file_type().unwrap();
                let relative = entry.path().strip_prefix(root).unwrap().to_str().unwrap().to_owned();
                if kind.is_dir() {
                    dirs.push(entry.path());
                    found.push(format!("{relative}/"));
                } else if kind.is_symlink() {
                    found.push(format!("{relative}@"));
                } else {
                    found.push(format!("{relative}={}", std::fs::read_to_string(entry.path()).unwrap()));
                }
            }
        }
        found.sort();
        found
    }

    const ALICE: Uuid = Uuid::from_u128(1);
    const BOB: Uuid = Uuid::from_u128(2);

    #[test]
    fn a_reused_dir_holds_the_next_jobs_inputs_and_nothing_else() {
        let home = tempfile::tempdir().unwrap();
        let (root, cache, outside) = (home.path().join("jobs"), home.path().join("cache"), home.path().join("outside"));
        for dir in [&root, &cache, &outside] {
            std::fs::create_dir(dir).unwrap();
        }
        let dirs = WorkDirs::new(root.clone());
        let first = inputs(&cache, &[("run.sh", "echo hi"), ("data/in.txt", "input")]);
        let work = dirs.stage(ALICE, None, &first).unwrap();
        let path = work.path().to_path_buf();
        assert_eq!(tree(&path), ["data/", "data/in.txt=input", "run.sh=echo hi"]);
        let inode = std::fs::metadata(path.join("run.sh")).unwrap().ino();

        // The job changes an input, makes it executable, writes results, links out of its dir.
        std::fs::write(path.join("run.sh"), "rm -rf /").unwrap();
        std::fs::set_permissions(path.join("run.sh"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(path.join("data/out.txt"), "result").unwrap();
        std::fs::create_dir_all(path.join("deep/er")).unwrap();
        std::fs::write(outside.join("keep.txt"), "not the job's").unwrap();
        std::os::unix::fs::symlink(&outside, path.join("escape")).unwrap();
        dirs.give_back(work);
        assert_eq!(tree(&path), ["data/", "data/in.txt=input", "run.sh=rm -rf /"], "only input copies wait");
        assert_eq!(tree(&outside), ["keep.txt=not the job's"], "links are removed, not followed");

        // The next job of the same mission gets the cache's content and mode, in the same inode.
        let work = dirs.stage(ALICE, None, &first).unwrap();
        assert_eq!(work.path(), path);
        assert_eq!(tree(&path), ["data/", "data/in.txt=input", "run.sh=echo hi"]);
        let (meta, source) = (std::fs::metadata(path.join("run.sh")).unwrap(), std::fs::metadata(&first[0].1).unwrap());
        assert_eq!((meta.ino(), meta.permissions().mode()), (inode, source.permissions().mode()));
        // A change that keeps the size is undone as well.
        std::fs::write(path.join("data/in.txt"), "INPUT").unwrap();
        dirs.give_back(work);
        let work = dirs.stage(ALICE, None, &first).unwrap();
        assert_eq!(tree(&path), ["data/", "data/in.txt=input", "run.sh=echo hi"]);
        dirs.give_back(work);

        // A job of another mission: what it does not have goes, what it has comes.
        let other = inputs(&cache, &[("data", "now a file"), ("main.py", "print(1)")]);
        let work = dirs.stage(ALICE, None, &other).unwrap();
        assert_eq!(tree(work.path()), ["data=now a file", "main.py=print(1)"]);
        assert_eq!(work.inputs().len(), 2);
        dirs.give_back(work);

        // A copy the job replaced with a link is made anew; the link's target is left alone.
        let work = dirs.stage(ALICE, None, &other).unwrap();
        let path = work.path().to_path_buf();
        std::fs::remove_file(path.join("main.py")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep.txt"), path.join("main.py")).unwrap();
        let work = {
            dirs.give_back(work);
            dirs.stage(ALICE, None, &other).unwrap()
        };
        assert_eq!(work.path(), path);
        assert_eq!(tree(&path), ["data=now a file", "main.py=print(1)"]);
        assert_eq!(tree(&outside), ["keep.txt=not the job's"]);

        // Two jobs at once get two dirs; dirs holding big inputs are not kept; the pool's end
        // removes what waits.
        let big = inputs(&cache, &[("big.bin", &"x".repeat(KEEP_MAX_BYTES as usize + 1))]);
        let second = dirs.stage(ALICE, None, &big).unwrap();
        assert_ne!(second.path(), work.path());
        let second_path = second.path().to_path_buf();
        dirs.give_back(second);
        assert!(!second_path.exists(), "a dir with big inputs is removed");
        dirs.give_back(work);

        // Another user's job never gets alice's dir, nor her copies; dirs are private.
        let bobs = dirs.stage(BOB, None, &other).unwrap();
        assert_ne!(bobs.path(), path);
        assert_eq!(std::fs::metadata(bobs.path()).unwrap().permissions().mode() & 0o777, 0o700);
        dirs.give_back(bobs);
        drop(dirs);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "idle dirs go with the pool");
    }
}
