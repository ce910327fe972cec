//! `--console` specs: parsing the kernel's console syntax, the `console=` karg, the GRUB commands,
//! and the GRUB config's CONSOLE-SETTINGS block.

use anyhow::{bail, Context, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Markers around the console commands in CoreOS's GRUB config (written by coreos-assembler).
pub(crate) const BLOCK_START: &str = "# CONSOLE-SETTINGS-START";
pub(crate) const BLOCK_END: &str = "# CONSOLE-SETTINGS-END";

/// Newer images keep the console block in its own file; older ones only in grub.cfg.
const CONSOLE_CFG: &str = "grub2/console.cfg";
const GRUB_CFG: &str = "grub2/grub.cfg";

/// The kernel's default serial settings when a spec gives only the port: 9600 baud, 8N1.
const DEFAULT_SPEED: u32 = 9600;
const DEFAULT_WORD: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parity {
    None,
    Odd,
    Even,
}

/// A console, as given to `--console`.
///
/// Stop bits and flow control are not represented: the kernel's `console=` syntax has no stop
/// bits (always 1, which is also GRUB's default), and GRUB cannot do RTS/CTS, so an `r` suffix
/// is rejected rather than silently dropped for the bootloader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Console {
    /// A console that is not a UART: `tty<n>` (virtual terminal), `hvc<n>` (hypervisor),
    /// `ttysclp<n>` (s390x SCLP). GRUB reaches it through the firmware console.
    Graphical(String),
    /// A UART: `ttyS<n>` (8250/16550) or `ttyAMA<n>` (ARM PL011).
    Serial {
        /// Device name with its number, e.g. `ttyS0`, `ttyAMA1`.
        name: String,
        /// The port number, used as GRUB's `--unit`.
        unit: u32,
        speed: u32,
        parity: Parity,
        /// Data bits, 5 to 8.
        word: u8,
    },
}

/// Prefixes of the serial devices we accept. ttyAMA is treated like ttyS, with its port number
/// as GRUB's unit, exactly as coreos-installer does: on aarch64 UEFI, GRUB's `serial` command is
/// then best effort, and the kernel argument is what matters.
const SERIAL_PREFIXES: [&str; 2] = ["ttyAMA", "ttyS"];
/// Prefixes of the non-UART consoles. Order matters: `ttysclp` before `tty`.
const GRAPHICAL_PREFIXES: [&str; 3] = ["ttysclp", "hvc", "tty"];

impl Console {
    /// The kernel argument, normalised: `console=ttyS0,115200n8`, `console=tty0`.
    pub fn karg(&self) -> String {
        format!("console={self}")
    }

    /// Check a value that may have been built by hand rather than parsed: it must be exactly what
    /// parsing its own spec gives back.
    pub fn check(&self) -> Result<()> {
        let spec = self.to_string();
        let parsed: Console = spec.parse()?;
        if &parsed != self {
            bail!("inconsistent console value {self:?}: its spec {spec:?} parses differently");
        }
        Ok(())
    }
}

impl fmt::Display for Console {
    /// The spec as the kernel takes it after `console=`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Console::Graphical(name) => f.write_str(name),
            Console::Serial {
                name,
                speed,
                parity,
                word,
                ..
            } => {
                let parity = match parity {
                    Parity::None => 'n',
                    Parity::Odd => 'o',
                    Parity::Even => 'e',
                };
                write!(f, "{name},{speed}{parity}{word}")
            }
        }
    }
}

impl FromStr for Console {
    type Err = anyhow::Error;

    /// Parse `ttyS<n>[,<speed>[<parity>[<bits>]]]` (also `ttyAMA<n>…`), `tty<n>`, `hvc<n>` or
    /// `ttysclp<n>`. Missing serial settings take the kernel defaults (9600n8).
    fn from_str(spec: &str) -> Result<Self> {
        parse(spec).with_context(|| {
            format!(
                "invalid console {spec:?}: expected ttyS<n>[,<speed>[n|o|e[5-8]]], \
                 ttyAMA<n>[,…], tty<n>, hvc<n> or ttysclp<n>"
            )
        })
    }
}

fn parse(spec: &str) -> Result<Console> {
    // Point at the two usual mistakes directly.
    for prefix in ["console=", "/dev/"] {
        if spec.starts_with(prefix) {
            bail!("the spec must not start with {prefix:?}");
        }
    }
    let (device, settings) = match spec.split_once(',') {
        Some((device, settings)) => (device, Some(settings)),
        None => (spec, None),
    };
    if let Some((prefix, unit)) = split_device(device, &SERIAL_PREFIXES)? {
        let (speed, parity, word) = match settings {
            None => (DEFAULT_SPEED, Parity::None, DEFAULT_WORD),
            Some(s) => parse_serial_settings(s)?,
        };
        return Ok(Console::Serial {
            name: format!("{prefix}{unit}"),
            unit,
            speed,
            parity,
            word,
        });
    }
    if let Some((prefix, number)) = split_device(device, &GRAPHICAL_PREFIXES)? {
        if settings.is_some() {
            bail!("{prefix}{number} is not a serial console and takes no settings");
        }
        return Ok(Console::Graphical(format!("{prefix}{number}")));
    }
    bail!("unknown console device {device:?}")
}

/// Split `ttyS12` into (`ttyS`, 12) for the first matching prefix. Ok(None) if no prefix matches
/// or the rest is not all digits (so `ttysclp0` is not mistaken for `tty` + `sclp0`).
fn split_device<'a>(device: &str, prefixes: &[&'a str]) -> Result<Option<(&'a str, u32)>> {
    for prefix in prefixes {
        let Some(digits) = device.strip_prefix(prefix) else {
            continue;
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let number = digits
            .parse()
            .with_context(|| format!("device number {digits:?} is out of range"))?;
        return Ok(Some((prefix, number)));
    }
    Ok(None)
}

/// `<speed>[<parity>[<bits>]]`, e.g. `115200`, `115200n`, `115200n8`.
fn parse_serial_settings(s: &str) -> Result<(u32, Parity, u8)> {
    let digits_end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let (speed, rest) = s.split_at(digits_end);
    if speed.is_empty() {
        bail!("missing speed after ','");
    }
    let speed: u32 = speed
        .parse()
        .with_context(|| format!("speed {speed:?} is out of range"))?;
    if speed == 0 {
        bail!("speed must not be 0");
    }
    let mut chars = rest.chars();
    let parity = match chars.next() {
        None => return Ok((speed, Parity::None, DEFAULT_WORD)),
        Some('n') => Parity::None,
        Some('o') => Parity::Odd,
        Some('e') => Parity::Even,
        Some(c) => bail!("unknown parity {c:?} (expected n, o or e)"),
    };
    let word = match chars.next() {
        None => DEFAULT_WORD,
        Some(c @ '5'..='8') => c as u8 - b'0',
        Some(c) => bail!("unsupported data bits {c:?} (expected 5 to 8)"),
    };
    if let Some(c) = chars.next() {
        // Typically `r` (RTS/CTS), which GRUB cannot do.
        bail!("unexpected {c:?} after the data bits (flow control is not supported)");
    }
    Ok((speed, parity, word))
}

/// The GRUB commands for these consoles, in order:
/// - `serial --unit=N --speed=S --word=W --parity=P` for the FIRST serial console given. GRUB's
///   `serial` terminal is a single port (each `serial` command re-points it), so one command is
///   all that can take effect; more than one serial console gets a warning.
/// - `terminal_input` and `terminal_output` naming `serial` and/or `console`, each once, in the
///   order the consoles were given, so that GRUB's list reads like the kernel's `console=` order.
///
/// No consoles, no commands.
pub(crate) fn grub_commands(consoles: &[Console]) -> Vec<String> {
    let mut commands = Vec::new();
    let mut serials = consoles.iter().filter_map(|c| match c {
        Console::Graphical(_) => None,
        Console::Serial {
            unit,
            speed,
            parity,
            word,
            ..
        } => {
            let parity = match parity {
                Parity::None => "no",
                Parity::Odd => "odd",
                Parity::Even => "even",
            };
            Some(format!(
                "serial --unit={unit} --speed={speed} --word={word} --parity={parity}"
            ))
        }
    });
    if let Some(first) = serials.next() {
        commands.push(first);
        if serials.next().is_some() {
            tracing::warn!(
                "several serial consoles given; GRUB drives only one serial port, the first given"
            );
        }
    }
    let mut terminals: Vec<&str> = Vec::new();
    for console in consoles {
        let terminal = match console {
            Console::Graphical(_) => "console",
            Console::Serial { .. } => "serial",
        };
        if !terminals.contains(&terminal) {
            terminals.push(terminal);
        }
    }
    if !terminals.is_empty() {
        let list = terminals.join(" ");
        commands.push(format!("terminal_input {list}"));
        commands.push(format!("terminal_output {list}"));
    }
    commands
}

/// Replace the lines strictly between the CONSOLE-SETTINGS markers with `commands`, one per line.
/// Everything else, markers included, is kept byte for byte. Only the first block is replaced.
/// A marker line matches after trimming trailing whitespace.
pub(crate) fn replace_console_block(cfg: &str, commands: &[String]) -> Result<String> {
    // Byte offsets: just after the START line, and at the start of the END line.
    let mut body_start = None;
    let mut body_end = None;
    let mut offset = 0;
    for line in cfg.split_inclusive('\n') {
        let text = line.trim_end();
        match body_start {
            None if text == BLOCK_START => body_start = Some(offset + line.len()),
            Some(_) if text == BLOCK_END => {
                body_end = Some(offset);
                break;
            }
            _ => {}
        }
        offset += line.len();
    }
    let Some(body_start) = body_start else {
        bail!("missing marker line `{BLOCK_START}`");
    };
    let Some(body_end) = body_end else {
        bail!("missing marker line `{BLOCK_END}` after `{BLOCK_START}`");
    };
    let body: String = commands.iter().map(|c| format!("{c}\n")).collect();
    Ok(format!("{}{body}{}", &cfg[..body_start], &cfg[body_end..]))
}

/// Rewrite the console block on /boot: in `grub2/console.cfg` if present, else in
/// `grub2/grub.cfg`. Returns the file that was edited.
pub(crate) fn write_console_block(boot_root: &Path, commands: &[String]) -> Result<PathBuf> {
    let path = Some(boot_root.join(CONSOLE_CFG))
        .filter(|p| p.exists())
        .unwrap_or_else(|| boot_root.join(GRUB_CFG));
    let edit = || -> Result<()> {
        let cfg = std::fs::read_to_string(&path).context("reading the file")?;
        let new_cfg = replace_console_block(&cfg, commands)?;
        if new_cfg != cfg {
            super::files::rewrite(&path, new_cfg.as_bytes())?;
        }
        Ok(())
    };
    edit().with_context(|| format!("writing the GRUB console settings to {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serial(name: &str, unit: u32, speed: u32, parity: Parity, word: u8) -> Console {
        Console::Serial {
            name: name.to_string(),
            unit,
            speed,
            parity,
            word,
        }
    }

    /// Each spec's karg and GRUB commands, which between them show every field parsed.
    #[test]
    fn valid_specs() {
        let cases = [
            (
                "ttyS0",
                "ttyS0,9600n8",
                Some("0 --speed=9600 --word=8 --parity=no"),
            ),
            (
                "ttyS1,115200n8",
                "ttyS1,115200n8",
                Some("1 --speed=115200 --word=8 --parity=no"),
            ),
            (
                "ttyAMA0,115200",
                "ttyAMA0,115200n8",
                Some("0 --speed=115200 --word=8 --parity=no"),
            ),
            (
                "ttyS2,57600o",
                "ttyS2,57600o8",
                Some("2 --speed=57600 --word=8 --parity=odd"),
            ),
            (
                "ttyS3,19200e7",
                "ttyS3,19200e7",
                Some("3 --speed=19200 --word=7 --parity=even"),
            ),
            (
                "ttyS01",
                "ttyS1,9600n8",
                Some("1 --speed=9600 --word=8 --parity=no"),
            ),
            ("tty0", "tty0", None),
            ("tty1", "tty1", None),
            ("hvc0", "hvc0", None),
            ("ttysclp0", "ttysclp0", None),
        ];
        for (spec, karg, grub) in cases {
            let console: Console = spec.parse().unwrap_or_else(|e| panic!("{spec}: {e:#}"));
            assert_eq!(console.karg(), format!("console={karg}"), "{spec}");
            let terminal = if grub.is_some() { "serial" } else { "console" };
            let mut expected: Vec<String> = grub
                .map(|g| format!("serial --unit={g}"))
                .into_iter()
                .collect();
            expected.push(format!("terminal_input {terminal}"));
            expected.push(format!("terminal_output {terminal}"));
            assert_eq!(
                grub_commands(std::slice::from_ref(&console)),
                expected,
                "{spec}"
            );
            console.check().unwrap();
        }
        assert_eq!(
            "ttyS3,19200e7".parse::<Console>().unwrap(),
            serial("ttyS3", 3, 19200, Parity::Even, 7)
        );
    }

    #[test]
    fn invalid_specs() {
        for spec in [
            "",
            "ttyS",
            "ttyS0,abc",
            "ttyS0,115200x8",
            "ttyS0,115200n4",
            "ttyS0,115200n9",
            "ttyS0,115200n8r",
            "ttyS0,",
            "ttyS0,0",
            "ttyS0,n8",
            "ttyS0,99999999999",
            "ttyS99999999999",
            "com1",
            "ttyB0",
            "ttyS0z",
            "zttyS0",
            "tty",
            "tty0,115200",
            "hvc",
            "ttysclp",
            "ttyUSB0",
            "console=ttyS0",
            "/dev/ttyS0",
            " ttyS0",
            "ttyS0 ",
        ] {
            let err = spec.parse::<Console>().unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("invalid console {spec:?}")),
                "{spec}: {err}"
            );
        }
        let err = "ttyS0,115200x8".parse::<Console>().unwrap_err();
        assert!(format!("{err:#}").contains("unknown parity 'x'"), "{err:#}");
        let err = "console=ttyS0".parse::<Console>().unwrap_err();
        assert!(format!("{err:#}").contains("must not start with \"console=\""));
    }

    #[test]
    fn check_rejects_inconsistent_hand_built_values() {
        assert!(serial("ttyS0", 1, 9600, Parity::None, 8).check().is_err());
        assert!(serial("ttyS0", 0, 9600, Parity::None, 9).check().is_err());
        assert!(serial("ttyS0", 0, 0, Parity::None, 8).check().is_err());
        assert!(serial("com0", 0, 9600, Parity::None, 8).check().is_err());
        assert!(Console::Graphical("ttyS0".into()).check().is_err());
        assert!(Console::Graphical("vga".into()).check().is_err());
    }

    fn parse_all(specs: &[&str]) -> Vec<Console> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn grub_commands_for_console_lists() {
        assert!(grub_commands(&[]).is_empty());
        // Single consoles and their order: postinstall's
        // platform_and_console_set_the_kargs_and_grub_commands.
        // Only the first serial console configures GRUB's serial port; terminals are not repeated.
        assert_eq!(
            grub_commands(&parse_all(&[
                "ttyS1,57600e7",
                "hvc0",
                "ttyS0,115200",
                "tty0"
            ])),
            [
                "serial --unit=1 --speed=57600 --word=7 --parity=even",
                "terminal_input serial console",
                "terminal_output serial console"
            ]
        );
    }

    const CFG: &str = "set timeout=1\n# Any non-default console settings will be inserted here.\n\
                       # CONSOLE-SETTINGS-START\nserial --speed=115200\nterminal_input serial console\n\
                       terminal_output serial console\n# CONSOLE-SETTINGS-END\n\nmenuentry x {\n}\n";

    #[test]
    fn console_block_replacement() {
        let head = "set timeout=1\n# Any non-default console settings will be inserted here.\n\
                    # CONSOLE-SETTINGS-START\n";
        let tail = "# CONSOLE-SETTINGS-END\n\nmenuentry x {\n}\n";
        // One or more commands, or none, replacing the image's: the /boot tests in postinstall.
        // An empty block, at the very start, without a final newline after the END marker.
        let cfg = "# CONSOLE-SETTINGS-START\n# CONSOLE-SETTINGS-END";
        assert_eq!(
            replace_console_block(cfg, &["a".into()]).unwrap(),
            "# CONSOLE-SETTINGS-START\na\n# CONSOLE-SETTINGS-END"
        );
        // Only the first block is replaced.
        let twice = format!("{CFG}{CFG}");
        let replaced = replace_console_block(&twice, &[]).unwrap();
        assert_eq!(replaced, format!("{head}{tail}{CFG}"));
    }

    #[test]
    fn console_block_missing_markers() {
        let err = replace_console_block("a\nb\n", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missing marker line `# CONSOLE-SETTINGS-START`"
        );
        let err = replace_console_block("a\n# CONSOLE-SETTINGS-START\nb\n", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missing marker line `# CONSOLE-SETTINGS-END` after `# CONSOLE-SETTINGS-START`"
        );
        // END before START does not count; a START marker that is part of a line does not count.
        assert!(
            replace_console_block("# CONSOLE-SETTINGS-END\n# CONSOLE-SETTINGS-START\n", &[])
                .is_err()
        );
        assert!(
            replace_console_block("x # CONSOLE-SETTINGS-START\n# CONSOLE-SETTINGS-END\n", &[])
                .is_err()
        );
    }
}
