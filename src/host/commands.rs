//! Running host commands: the one effect boundary every host-side step goes through.
//!
//! [`HostRunner`] runs a program in the host's namespaces, as the Go installer does from its
//! privileged container (`nsenter --target 1 --cgroup --mount --ipc --pid -- <program> <args…>`),
//! or directly (when this binary runs on the host itself);
//! [`RecordingRunner`] records every call and answers from a script (tests, rehearsals).
//!
//! Output is stdout and stderr merged into one buffer and trimmed. A failure is an
//! [`ExecError`] whose `Display` is the Go `ExecCommandError.Error()` text, which triage
//! signatures and the service's `Failed` info depend on.

use std::collections::VecDeque;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Replacement text for the pull-secret token wherever a command line is rendered.
pub(crate) const SECRET_PLACEHOLDER: &str = "<SECRET>";

/// How many trailing bytes of output `ExecError`'s `Display` keeps (Go: 200).
const LAST_OUTPUT_LEN: usize = 200;

/// Runs one host command and returns its merged, trimmed stdout+stderr.
pub trait CommandRunner: Send + Sync {
    fn run(&self, program: &str, args: &[&str]) -> Result<String, ExecError> {
        self.run_streaming(program, args, &mut |_| {})
    }

    /// Like [`CommandRunner::run`], also handing output chunks to `sink` as they arrive (for
    /// progress parsing).
    fn run_streaming(
        &self,
        program: &str,
        args: &[&str],
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<String, ExecError>;
}

/// A failed command, rendered exactly like the Go installer's `ExecCommandError`.
///
/// The secret (pull-secret token) is replaced by `<SECRET>` when the error is built, so the
/// error never holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecError {
    /// The executable as run (a `PATH` lookup result, like Go's `cmd.Path`).
    pub command: String,
    /// Its arguments (for nsenter: the nsenter options, the program and its arguments).
    pub args: Box<[String]>,
    /// Extra environment given to the child, as `K=V`.
    pub env: Box<[String]>,
    /// Go's text of the wait error: `exit status 1`, `signal: killed`, or why it did not start.
    pub exit_error: String,
    /// The exit code when the process exited normally.
    pub exit_code: Option<i32>,
    /// Go's `WaitStatus`: the exit code, -1 when killed by a signal, 0 when it never ran.
    pub wait_status: i32,
    /// Merged output, trimmed, kept from the first `Error` on when that word occurs.
    pub output: String,
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "failed executing {} [{}], Error {}, LastOutput \"{}\"",
            self.command,
            self.args.join(" "),
            self.exit_error,
            last_output(&self.output)
        )
    }
}

impl std::error::Error for ExecError {}

impl ExecError {
    /// An error for `command args…` that failed with `exit_error`; `output` is the raw merged
    /// output (the "keep from `Error` on" rule is applied here).
    pub(crate) fn new<S: AsRef<str>>(
        command: impl Into<String>,
        args: &[S],
        exit_error: impl Into<String>,
        exit_code: Option<i32>,
        output: &str,
    ) -> Self {
        let output = output.trim();
        // Go keeps only the text from the first `Error` on, when the output contains it.
        let output = output.find("Error").map_or(output, |i| &output[i..]);
        ExecError {
            command: command.into(),
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
            env: Box::default(),
            exit_error: exit_error.into(),
            exit_code,
            wait_status: exit_code.unwrap_or(0),
            output: output.to_string(),
        }
    }

    /// An error for a process that exited with `code`.
    fn exit<S: AsRef<str>>(command: &str, args: &[S], code: i32, output: &str) -> Self {
        ExecError::new(
            command,
            args,
            format!("exit status {code}"),
            Some(code),
            output,
        )
    }

    /// Replaces `secret` by `<SECRET>` in the arguments, the environment and the output.
    /// An empty secret changes nothing.
    pub(crate) fn redact(mut self, secret: Option<&str>) -> Self {
        if let Some(secret) = secret.filter(|s| !s.is_empty()) {
            for s in self.args.iter_mut().chain(self.env.iter_mut()) {
                *s = s.replace(secret, SECRET_PLACEHOLDER);
            }
            self.output = self.output.replace(secret, SECRET_PLACEHOLDER);
        }
        self
    }

    /// Go's `DetailedError()`: also the environment, the wait status and the whole output.
    fn detailed(&self) -> String {
        format!(
            "failed executing {} [{}], env vars [{}], error {}, waitStatus {}, Output \"{}\"",
            self.command,
            self.args.join(" "),
            self.env.join(" "),
            self.exit_error,
            self.wait_status,
            self.output
        )
    }

    /// Whether the command ran and exited (as opposed to not starting or being killed).
    pub(crate) fn exited(&self) -> bool {
        self.exit_code.is_some()
    }
}

/// The last 200 bytes of `output`, prefixed by `... ` when cut (moved forward to a character
/// boundary, where Go would cut a multi-byte character in two).
fn last_output(output: &str) -> String {
    if output.len() <= LAST_OUTPUT_LEN {
        return output.to_string();
    }
    let mut start = output.len() - LAST_OUTPUT_LEN;
    while !output.is_char_boundary(start) {
        start += 1;
    }
    format!("... {}", &output[start..])
}

/// Replaces `secret` (when non-empty) by `<SECRET>` in `text`.
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    match secret.filter(|s| !s.is_empty()) {
        Some(secret) => text.replace(secret, SECRET_PLACEHOLDER),
        None => text.to_string(),
    }
}

/// The options that put a command into the host's namespaces (PID 1's).
const NSENTER_PREFIX: [&str; 7] = [
    "--target", "1", "--cgroup", "--mount", "--ipc", "--pid", "--",
];

/// Runs host commands: through `nsenter` into the host's namespaces (from the installer's
/// privileged container), or directly (when this binary itself runs on the host).
#[derive(Clone, Default)]
pub struct HostRunner {
    pub(crate) nsenter: bool,
    /// Extra variables for every child (the proxy variables when `--http-proxy` or
    /// `--https-proxy` is set).
    pub(crate) env: Vec<(String, String)>,
    /// Redacted as `<SECRET>` in errors and logs.
    pub(crate) secret: Option<String>,
}

impl std::fmt::Debug for HostRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRunner")
            .field("nsenter", &self.nsenter)
            .field("env", &env_strings(&self.env, self.secret.as_deref()))
            .field("secret", &self.secret.as_ref().map(|_| SECRET_PLACEHOLDER))
            .finish()
    }
}

impl CommandRunner for HostRunner {
    fn run_streaming(
        &self,
        program: &str,
        args: &[&str],
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<String, ExecError> {
        let (exe, args) = match self.nsenter {
            true => ("nsenter", [&NSENTER_PREFIX[..], &[program], args].concat()),
            false => (program, args.to_vec()),
        };
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        execute(exe, &args, &self.env, self.secret.as_deref(), sink)
    }
}

fn env_strings(env: &[(String, String)], secret: Option<&str>) -> Vec<String> {
    env.iter()
        .map(|(k, v)| redact(&format!("{k}={v}"), secret))
        .collect()
}

/// Go's text for a signal death (`ProcessState.String()`).
fn signal_text(sig: i32) -> String {
    let name = match sig {
        1 => "hangup",
        2 => "interrupt",
        3 => "quit",
        4 => "illegal instruction",
        5 => "trace/breakpoint trap",
        6 => "aborted",
        7 => "bus error",
        8 => "floating point exception",
        9 => "killed",
        10 => "user defined signal 1",
        11 => "segmentation fault",
        12 => "user defined signal 2",
        13 => "broken pipe",
        14 => "alarm clock",
        15 => "terminated",
        _ => return format!("signal: signal {sig}"),
    };
    format!("signal: {name}")
}

/// Spawns `program args…` with stdout and stderr merged into one buffer (and into `sink` as
/// chunks arrive), waits, and maps a failure to an [`ExecError`].
fn execute(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    secret: Option<&str>,
    sink: &mut dyn FnMut(&[u8]),
) -> Result<String, ExecError> {
    // Where `program` is found on `PATH` (Go's `exec.LookPath`), or `program` itself.
    let path = match program.contains('/') {
        true => program.to_string(),
        false => which::which(program).map_or(program.to_string(), |p| p.display().to_string()),
    };
    let env_list = env_strings(env, None);
    let fail = |exit_error: String, exit_code: Option<i32>, wait_status: i32, output: &str| {
        let err = ExecError {
            env: env_list.clone().into(),
            wait_status,
            ..ExecError::new(path.clone(), args, exit_error, exit_code, output)
        }
        .redact(secret);
        tracing::info!("{}", err.detailed());
        err
    };

    // One pipe for both streams, as Go gives the child one buffer: the merged text keeps the
    // order of the child's writes (the "keep from `Error` on" rule depends on it).
    let pipe = std::io::pipe().and_then(|(r, w)| Ok((r, w.try_clone()?, w)));
    let (mut reader, out, err) = match pipe {
        Ok(p) => p,
        Err(e) => return Err(fail(format!("pipe: {e}"), None, 0, "")),
    };
    // The Command, and with it our copies of the pipe's write end, is dropped at the end of
    // this statement, so the reader sees EOF when the child exits.
    let mut child = match Command::new(&path)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Err(fail(format!("exec: \"{program}\": {e}"), None, 0, "")),
    };
    let mut merged = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                sink(&buf[..n]);
                merged.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let status = child.wait();
    let output = String::from_utf8_lossy(&merged).trim().to_string();

    let status = match status {
        Ok(s) => s,
        Err(e) => return Err(fail(format!("wait: {e}"), None, 0, &output)),
    };
    if status.success() {
        tracing::debug!(
            command = %path,
            arguments = %redact(&args.join(" "), secret),
            output = %redact(&output, secret),
            "Command executed"
        );
        return Ok(output);
    }
    Err(match status.code() {
        Some(code) => fail(format!("exit status {code}"), Some(code), code, &output),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let mut text = signal_text(status.signal().unwrap_or(0));
            if status.core_dumped() {
                text.push_str(" (core dumped)");
            }
            fail(text, None, -1, &output)
        }
    })
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub program: String,
    pub args: Vec<String>,
}

impl Call {
    /// `program arg1 arg2…` joined by single spaces.
    pub fn line(&self) -> String {
        command_line(&self.program, &self.args)
    }
}

fn command_line<S: AsRef<str>>(program: &str, args: &[S]) -> String {
    std::iter::once(program)
        .chain(args.iter().map(|a| a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A scripted answer of [`RecordingRunner`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Success with this output.
    Ok(String),
    /// Exit with this code and output.
    Fail { code: i32, output: String },
}

impl Reply {
    pub fn ok(output: impl Into<String>) -> Self {
        Reply::Ok(output.into())
    }

    pub fn fail(code: i32, output: impl Into<String>) -> Self {
        Reply::Fail {
            code,
            output: output.into(),
        }
    }
}

type Script = Box<dyn Fn(&str, &[String]) -> Option<Reply> + Send + Sync>;

/// Records every call and answers from a script; unknown commands succeed with empty output.
/// `run_streaming` hands the scripted output over in `\n`/`\r`-terminated pieces.
///
/// Answers are looked up by the whole command line (`program arg1 arg2…`, single spaces):
/// first the replies queued with [`RecordingRunner::reply`] (several replies for one line are
/// used in order, the last one repeats), then the closure of [`RecordingRunner::with_script`].
#[derive(Default)]
pub struct RecordingRunner {
    calls: Mutex<Vec<Call>>,
    replies: Mutex<Vec<(String, VecDeque<Reply>)>>,
    script: Option<Script>,
}

impl RecordingRunner {
    pub fn new() -> Self {
        RecordingRunner::default()
    }

    /// A runner that asks `script` for the answer to each call (`None`: succeed with "").
    pub fn with_script(
        script: impl Fn(&str, &[String]) -> Option<Reply> + Send + Sync + 'static,
    ) -> Self {
        RecordingRunner {
            script: Some(Box::new(script)),
            ..RecordingRunner::default()
        }
    }

    /// Queues `reply` for the command line `line`.
    pub fn reply(&self, line: &str, reply: Reply) -> &Self {
        let mut replies = self.replies.lock().unwrap();
        match replies.iter_mut().find(|(l, _)| l == line) {
            Some((_, queue)) => queue.push_back(reply),
            None => replies.push((line.to_string(), VecDeque::from([reply]))),
        }
        self
    }

    /// Queues a success with `output` for `line`.
    pub fn ok(&self, line: &str, output: &str) -> &Self {
        self.reply(line, Reply::ok(output))
    }

    /// Queues a failure (exit `code`, `output`) for `line`.
    pub fn fail(&self, line: &str, code: i32, output: &str) -> &Self {
        self.reply(line, Reply::fail(code, output))
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Every call so far as a command line.
    pub fn lines(&self) -> Vec<String> {
        self.calls().iter().map(Call::line).collect()
    }
}

impl std::fmt::Debug for RecordingRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingRunner")
            .field("calls", &self.lines())
            .finish_non_exhaustive()
    }
}

impl CommandRunner for RecordingRunner {
    /// Hands the scripted output to `sink` as a program writing it line by line would: one
    /// chunk per `\n`- or `\r`-terminated piece (rsync rewrites its status line with `\r`),
    /// untrimmed; then returns it as [`CommandRunner::run`] does.
    fn run_streaming(
        &self,
        program: &str,
        args: &[&str],
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<String, ExecError> {
        // Record the call and find its scripted answer, untrimmed.
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let line = command_line(program, &args);
        self.calls.lock().unwrap().push(Call {
            program: program.to_string(),
            args: args.clone(),
        });
        let queued = self
            .replies
            .lock()
            .unwrap()
            .iter_mut()
            .find(|(l, _)| *l == line)
            .and_then(|(_, queue)| {
                if queue.len() > 1 {
                    queue.pop_front()
                } else {
                    queue.front().cloned()
                }
            });
        let reply = queued
            .or_else(|| self.script.as_ref().and_then(|s| s(program, &args)))
            .unwrap_or_else(|| Reply::ok(""));
        let output = match &reply {
            Reply::Ok(out) => out,
            Reply::Fail { output, .. } => output,
        };
        for piece in output.split_inclusive(['\n', '\r']) {
            sink(piece.as_bytes());
        }
        match reply {
            Reply::Ok(out) => Ok(out.trim().to_string()),
            Reply::Fail { code, output } => Err(ExecError::exit(program, &args, code, &output)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_keeps_last_200_bytes_and_secret_is_redacted() {
        let token = "TOKEN-123";
        let mut output = String::new();
        for i in 0..40 {
            output.push_str(&format!("progress line {i}\n"));
        }
        output.push_str("error: timeout\nF1019 fatal: could not read osImageURL from rpm-ostree");
        let args = ["run", "--pull-secret", token, "image"];
        let err = ExecError {
            env: ["HOME=/root".into(), format!("PULL_SECRET_TOKEN={token}")].into(),
            ..ExecError::new("nsenter", &args, "exit status 255", Some(255), &output)
        }
        .redact(Some(token));
        let tail = &output[output.len() - 200..];
        assert_eq!(
            err.to_string(),
            format!(
                "failed executing nsenter [run --pull-secret <SECRET> image], Error exit status \
                 255, LastOutput \"... {tail}\""
            )
        );
        assert_eq!(
            err.detailed(),
            format!(
                "failed executing nsenter [run --pull-secret <SECRET> image], env vars \
                 [HOME=/root PULL_SECRET_TOKEN=<SECRET>], error exit status 255, waitStatus 255, \
                 Output \"{output}\""
            )
        );
        assert!(!err.to_string().contains(token));
        assert!(!err.detailed().contains(token));
    }

    #[test]
    fn trimming_cutting_and_an_empty_secret() {
        // Kept from `Error` on: local_runner_failure_is_exec_error and
        // recording_runner_streams_line_by_line.
        let err = ExecError::exit("x", &["y"], 1, "  plain failure  ");
        assert_eq!(err.output, "plain failure");
        let s = last_output(&format!("{}{}", "é".repeat(150), "x"));
        assert!(
            s.starts_with("... ") && s.len() <= 204 && s.ends_with('x'),
            "{s}"
        );
        let err = ExecError::exit("a", &["b"], 1, "").redact(Some(""));
        assert_eq!(&*err.args, ["b"]);
        assert_eq!(redact("abc", None), "abc");
        assert_eq!(redact("abc", Some("b")), "a<SECRET>c");
    }

    #[test]
    fn nsenter_runner_error_names_nsenter_and_redacts() {
        // Whether nsenter works here or not, a failing program gives an error in Go's form
        // with the nsenter command line.
        let r = HostRunner {
            nsenter: true,
            env: vec![("HTTPS_PROXY".into(), "http://p:1".into())],
            secret: Some("tok-9".into()),
        };
        let err = r.run("false", &["tok-9"]).unwrap_err();
        assert!(err.command.ends_with("nsenter"), "{}", err.command);
        assert_eq!(
            err.args.join(" "),
            "--target 1 --cgroup --mount --ipc --pid -- false <SECRET>"
        );
        assert_eq!(&*err.env, ["HTTPS_PROXY=http://p:1"]);
        assert!(err
            .to_string()
            .contains("[--target 1 --cgroup --mount --ipc --pid -- false <SECRET>], Error "));
        assert!(!format!("{r:?}").contains("tok-9"));
    }

    #[test]
    fn stdout_and_stderr_keep_the_order_of_the_writes() {
        // Two pipes read by two threads could reorder these; Go's single buffer cannot.
        let r = HostRunner::default();
        for _ in 0..20 {
            let out = r
                .run(
                    "sh",
                    &["-c", "echo one >&2; echo two; echo three >&2; echo four"],
                )
                .unwrap();
            assert_eq!(out, "one\ntwo\nthree\nfour");
        }
    }

    #[test]
    fn local_runner_failure_is_exec_error() {
        let r = HostRunner {
            secret: Some("s3cret".into()),
            ..HostRunner::default()
        };
        let err = r
            .run(
                "sh",
                &[
                    "-c",
                    "echo noise; echo Error: bad s3cret >&2; exit 3",
                    "s3cret",
                ],
            )
            .unwrap_err();
        assert_eq!(err.exit_code, Some(3));
        assert_eq!(err.wait_status, 3);
        assert_eq!(err.exit_error, "exit status 3");
        assert_eq!(err.output, "Error: bad <SECRET>");
        assert!(err.command.ends_with("sh"));
        assert_eq!(err.args.last().unwrap(), "<SECRET>");
        let text = err.to_string();
        assert!(text.starts_with("failed executing "), "{text}");
        assert!(text.ends_with(", Error exit status 3, LastOutput \"Error: bad <SECRET>\""));
    }

    #[test]
    fn local_runner_env_streaming_missing_program_and_signal() {
        let r = HostRunner {
            env: vec![("HTTP_PROXY".into(), "http://proxy:3128".into())],
            ..HostRunner::default()
        };
        let mut seen = Vec::new();
        let out = r.run_streaming("sh", &["-c", "echo $HTTP_PROXY"], &mut |c| {
            seen.extend_from_slice(c)
        });
        assert_eq!(out.unwrap(), "http://proxy:3128");
        assert_eq!(String::from_utf8(seen).unwrap().trim(), "http://proxy:3128");
        let err = r.run("definitely-not-a-program-xyz", &[]).unwrap_err();
        assert_eq!((err.exit_code, err.wait_status), (None, 0));
        assert!(err
            .exit_error
            .starts_with("exec: \"definitely-not-a-program-xyz\""));
        let err = r.run("sh", &["-c", "kill -9 $$"]).unwrap_err();
        assert_eq!(err.exit_error, "signal: killed");
        assert_eq!(err.wait_status, -1);
    }

    #[test]
    fn recording_runner_scripts_and_records() {
        let r = RecordingRunner::new();
        r.ok("lsblk --json", "{}")
            .fail("mount /dev/sda2 /mnt", 32, "busy")
            .ok("mount /dev/sda2 /mnt", "");
        assert_eq!(r.run("lsblk", &["--json"]).unwrap(), "{}");
        let err = r.run("mount", &["/dev/sda2", "/mnt"]).unwrap_err();
        assert_eq!(err.exit_code, Some(32));
        assert_eq!(
            err.to_string(),
            "failed executing mount [/dev/sda2 /mnt], Error exit status 32, LastOutput \"busy\""
        );
        assert!(r.run("mount", &["/dev/sda2", "/mnt"]).is_ok());
        assert!(r.run("mount", &["/dev/sda2", "/mnt"]).is_ok());
        assert_eq!(r.run("other", &[]).unwrap(), "");
        assert_eq!(
            r.lines(),
            vec![
                "lsblk --json",
                "mount /dev/sda2 /mnt",
                "mount /dev/sda2 /mnt",
                "mount /dev/sda2 /mnt",
                "other"
            ]
        );
    }

    #[test]
    fn recording_runner_streams_line_by_line() {
        let r = RecordingRunner::new();
        r.ok("rsync", "list\n  1G  5%  8MB/s\r  2G 10%  8MB/s\r\n tail ")
            .fail("false", 1, "out\nError: x\r");
        let mut chunks = Vec::new();
        let out = r
            .run_streaming("rsync", &[], &mut |c| {
                chunks.push(String::from_utf8(c.to_vec()).unwrap())
            })
            .unwrap();
        assert_eq!(
            chunks,
            [
                "list\n",
                "  1G  5%  8MB/s\r",
                "  2G 10%  8MB/s\r",
                "\n",
                " tail "
            ]
        );
        assert_eq!(out, "list\n  1G  5%  8MB/s\r  2G 10%  8MB/s\r\n tail");
        let mut chunks = Vec::new();
        let err = r
            .run_streaming("false", &[], &mut |c| chunks.push(c.to_vec()))
            .unwrap_err();
        assert_eq!(chunks, [b"out\n".to_vec(), b"Error: x\r".to_vec()]);
        assert_eq!(err.output, "Error: x");
        assert_eq!(r.lines(), ["rsync", "false"]);
    }
}
