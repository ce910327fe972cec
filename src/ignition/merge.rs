//! Ignition v3 config merging, used by the single-node flow to fold the host's ignition (hostname,
//! network keyfiles, …) into the `master.ign` that bootkube produced (the Go installer's
//! `updateSingleNodeIgnition` with `MergeIgnitionConfig`). The Go installer does this with
//! Ignition's own `merge` package on typed v3.2 structs; this module applies the same rules to
//! JSON values so that any 3.0–3.4 config works and no field is lost for lack of a Rust type.
//!
//! # Rules (Ignition docs, "Operator Notes" → "Config Merging", and the per-list notes of the
//! `configuration-v3_*.md` specs)
//!
//! A child config is merged onto a parent config:
//!
//! - **Scalars** (strings, numbers, booleans): the child's value wins when the child sets it. A
//!   field the child leaves out, or sets to `null`, keeps the parent's value (Ignition's optional
//!   fields are pointers: nil means "not specified"). An explicit `false`, `0` or `""` does win.
//! - **Objects**: merged field by field, recursively.
//! - **Keyed lists** (the keys are in `list_rule`): a child entry whose key is already in the
//!   parent list is merged *into* that parent entry (recursively, with these same rules) in the
//!   parent's position; child entries with new keys are appended in child order. A child
//!   `httpHeaders` entry without `value` removes the parent's.
//! - Files, directories and links share one key space because they all describe a filesystem
//!   node: a child file at `/x` removes a parent directory or link at `/x` (and vice versa), and
//!   the child's entry lands in its own list. `kernelArguments.shouldExist` and `shouldNotExist`
//!   share one too: a child's `shouldNotExist` entry removes the parent's `shouldExist` one.
//! - **Lists of plain values** are sets: the child's values not already in the parent's list are
//!   appended.
//! - **Appended lists** (arguments passed to tools, and file fragments): concatenated, parent
//!   first, duplicates kept.
//!
//! Choices where Ignition's typed structs have no JSON equivalent, or where we had to decide:
//!
//! - A list this module does not know (a future spec field) is treated as a set when all its
//!   entries are plain values, and is appended otherwise; nothing is ever dropped.
//! - An entry of a keyed list that has no key (no `path`, say; Ignition would reject the config)
//!   is kept as is and never merged with another entry.
//! - A child list with two entries of the same key is not deduplicated (as in Ignition): the
//!   result fails the duplicate check below.
//! - When parent and child disagree on the JSON type of a field, the child's value wins.
//! - Objects are always merged, even where Ignition has a pointer-to-struct that a child replaces
//!   wholesale (`luks.clevis` in spec 3.2); the difference only shows when both configs set
//!   different fields of it.
//! - Merging fields into a keyed entry is what Ignition does, with its known sharp edge: a child
//!   file that sets `contents.source` but no `contents.compression` or `contents.verification`
//!   inherits the parent's values for those. The host and SNO configs do not hit this in practice
//!   (their files have distinct paths, except `/etc/hostname`, which neither compresses).
//! - The result's `ignition.version` is the higher of the two versions (every 3.x spec accepts its
//!   predecessors' fields unchanged).
//! - After merging, keyed lists and sets are checked for duplicate keys (files, directories and
//!   links together), the part of Ignition's post-merge validation that a merge can break. The rest
//!   of Ignition's validation (paths, modes, unit names, …) is not repeated here.

use super::config::parse;
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// The Ignition spec versions this module reads and writes.
pub(crate) const SUPPORTED_VERSIONS: [&str; 5] = ["3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0"];

/// The config's `ignition.version`, checked to be one of [`SUPPORTED_VERSIONS`].
pub(crate) fn spec_version(config: &Value) -> Result<&str> {
    let version = super::config::version(config)?;
    if SUPPORTED_VERSIONS.contains(&version) {
        return Ok(version);
    }
    // The version comes from the config, but it is not secret; bound it in case it is garbage.
    let shown: String = version.chars().take(32).collect();
    if version.starts_with("2.") || version.starts_with("1.") {
        bail!(
            "ignition config has spec version {shown:?}, which is not supported: only Ignition v3 \
             configs (spec 3.0.0 to 3.4.0) can be merged; translate older configs first"
        );
    }
    bail!("ignition config has unsupported spec version {shown:?} (supported: 3.0.0 to 3.4.0)");
}

/// Blank the config's `ignition.config` section (its `merge` and `replace` pointers), as the Go
/// SNO flow does to the host config before merging: the host ignition from the assisted-service
/// points at the MCS, which does not exist yet on a single node, and the merged result must not
/// make Ignition fetch or replace anything on first boot.
pub(crate) fn clear_config_pointers(host: &mut Value) {
    if let Some(ignition) = host.get_mut("ignition").and_then(Value::as_object_mut) {
        ignition.remove("config");
    }
}

/// Merge `child` onto `parent` with Ignition's rules (see the module documentation). Both must be
/// supported v3 configs; the result carries the higher of their spec versions and is checked for
/// duplicate keys.
pub fn merge(parent: &Value, child: &Value) -> Result<Value> {
    let parent_version = spec_version(parent).context("parent ignition config")?;
    let child_version = spec_version(child).context("child ignition config")?;
    let mut merged = merge_value(&[], parent, child);
    // Supported versions are `3.<digit>.0`: their text orders as their numbers.
    merged["ignition"]["version"] = parent_version.max(child_version).into();
    check_duplicates(&[], &merged).context("merged ignition config is invalid")?;
    Ok(merged)
}

/// The SNO step: parse both configs (`merge` checks their versions), blank the host config's pointers, merge the host config onto
/// the SNO `master.ign`, and serialise the result as compact JSON (like Go's `json.Marshal`; the
/// file is read by Ignition only).
pub fn merge_host_into_sno(sno_master_ign: &[u8], host_ign: &[u8]) -> Result<Vec<u8>> {
    let sno = parse(sno_master_ign).context("cannot parse the SNO master ignition")?;
    let mut host = parse(host_ign).context("cannot parse the host ignition")?;
    clear_config_pointers(&mut host);
    let merged = merge(&sno, &host)
        .context("cannot merge the host ignition into the SNO master ignition")?;
    serde_json::to_vec(&merged).context("cannot serialise the merged SNO master ignition")
}

/// How the entries of one list are identified.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KeyKind {
    /// By the string (or number) value of this field of each entry.
    Field(&'static str),
    /// `number` when non-zero, else `label`.
    Partition,
    /// By the entry itself (lists of plain values).
    Value,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ListRule {
    Keyed(KeyKind),
    /// Keyed by `name`; a child entry without a `value` deletes the parent entry.
    HttpHeaders,
    Append,
    /// Not a list we know: a set of plain values, or appended when it holds objects.
    Unknown,
}

/// The merge rule of the list at `path` (field names from the root, list indices left out).
fn list_rule(path: &[&str]) -> ListRule {
    use KeyKind::{Field, Partition};
    use ListRule::{Append, HttpHeaders, Keyed, Unknown};
    const SET: ListRule = Keyed(KeyKind::Value);
    match path {
        [.., "httpHeaders"] => HttpHeaders,
        ["ignition", "config", "merge"] => Keyed(Field("source")),
        ["ignition", "security", "tls", "certificateAuthorities"] => Keyed(Field("source")),
        ["ignition", "proxy", "noProxy"] => SET,
        ["storage", "files" | "directories" | "links"] => Keyed(Field("path")),
        ["storage", "files", "append"] => Append,
        ["storage", "disks"] => Keyed(Field("device")),
        ["storage", "disks", "partitions"] => Keyed(Partition),
        ["storage", "raid"] => Keyed(Field("name")),
        ["storage", "raid", "devices"] => SET,
        ["storage", "raid", "options"] => Append,
        ["storage", "filesystems"] => Keyed(Field("device")),
        ["storage", "filesystems", "options" | "mountOptions"] => Append,
        ["storage", "luks"] => Keyed(Field("name")),
        ["storage", "luks", "options" | "openOptions"] => Append,
        ["storage", "luks", "clevis", "tang"] => Keyed(Field("url")),
        ["systemd", "units"] | ["systemd", "units", "dropins"] => Keyed(Field("name")),
        ["passwd", "users" | "groups"] => Keyed(Field("name")),
        ["passwd", "users", "sshAuthorizedKeys" | "groups"] => SET,
        ["kernelArguments", "shouldExist" | "shouldNotExist"] => SET,
        _ => Unknown,
    }
}

/// Lists of the object at `path` whose entries share one key space.
fn shared_key_space(path: &[&str]) -> &'static [&'static str] {
    match path {
        ["storage"] => &["files", "directories", "links"],
        ["kernelArguments"] => &["shouldExist", "shouldNotExist"],
        _ => &[],
    }
}

/// The key kind of a list under `rule`, given its entries (for [`ListRule::Unknown`]).
fn key_kind(rule: ListRule, entries: &[&[Value]]) -> Option<KeyKind> {
    match rule {
        ListRule::Keyed(kind) => Some(kind),
        ListRule::HttpHeaders => Some(KeyKind::Field("name")),
        ListRule::Append => None,
        ListRule::Unknown => {
            let plain = entries.iter().flat_map(|list| list.iter()).all(is_plain);
            plain.then_some(KeyKind::Value)
        }
    }
}

fn is_plain(value: &Value) -> bool {
    !(value.is_object() || value.is_array())
}

/// The key of one entry, or `None` when it has none.
fn key_of(kind: KeyKind, entry: &Value) -> Option<String> {
    let scalar = |value: &Value| match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match kind {
        KeyKind::Field(field) => entry.get(field).and_then(scalar),
        KeyKind::Partition => match entry.get("number").and_then(Value::as_i64) {
            Some(number) if number != 0 => Some(format!("number:{number}")),
            _ => entry
                .get("label")
                .and_then(Value::as_str)
                .map(|label| format!("label:{label}")),
        },
        // The JSON text keeps "1" and 1 apart.
        KeyKind::Value => is_plain(entry).then(|| entry.to_string()),
    }
}

fn merge_value<'a>(path: &[&'a str], parent: &'a Value, child: &'a Value) -> Value {
    match (parent, child) {
        (_, Value::Null) => parent.clone(),
        (Value::Object(parent), Value::Object(child)) => {
            Value::Object(merge_object(path, parent, child))
        }
        (Value::Array(parent), Value::Array(child)) => {
            Value::Array(merge_list(path, parent, child, &HashSet::new()))
        }
        _ => child.clone(),
    }
}

fn merge_object<'a>(
    path: &[&'a str],
    parent: &'a Map<String, Value>,
    child: &'a Map<String, Value>,
) -> Map<String, Value> {
    let shared = shared_key_space(path);
    let mut result = Map::new();
    let keys = parent
        .keys()
        .chain(child.keys().filter(|key| !parent.contains_key(*key)));
    for key in keys {
        let sub_path: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
        let from_parent = parent.get(key).filter(|v| !v.is_null());
        let from_child = child.get(key).filter(|v| !v.is_null());
        let lists = (
            from_parent.map_or(Some(&[][..]), |v| v.as_array().map(Vec::as_slice)),
            from_child.map_or(Some(&[][..]), |v| v.as_array().map(Vec::as_slice)),
        );
        let merged = match lists {
            // A list sharing its key space with sibling lists: the parent's entries whose key the
            // child uses in a sibling list are dropped (the child's entry replaces them there).
            (Some(parent_list), Some(child_list)) if shared.contains(&key.as_str()) => {
                let taken = sibling_keys(path, shared, key, child);
                Value::Array(merge_list(&sub_path, parent_list, child_list, &taken))
            }
            _ => match (from_parent, from_child) {
                (Some(p), Some(c)) => merge_value(&sub_path, p, c),
                (Some(p), None) => p.clone(),
                (None, Some(c)) => c.clone(),
                // Both absent or null: keep the parent's spelling of "nothing".
                (None, None) => parent
                    .get(key)
                    .or_else(|| child.get(key))
                    .cloned()
                    .unwrap_or(Value::Null),
            },
        };
        result.insert(key.clone(), merged);
    }
    result
}

/// Keys the child uses in the lists of `shared` other than `own`.
fn sibling_keys(
    path: &[&str],
    shared: &[&str],
    own: &str,
    child: &Map<String, Value>,
) -> HashSet<String> {
    let mut keys = HashSet::new();
    for sibling in shared.iter().filter(|s| **s != own) {
        let sibling_path: Vec<&str> = path.iter().copied().chain([*sibling]).collect();
        let entries = child
            .get(*sibling)
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        if let Some(kind) = key_kind(list_rule(&sibling_path), &[entries]) {
            keys.extend(entries.iter().filter_map(|entry| key_of(kind, entry)));
        }
    }
    keys
}

/// Merge two lists. `taken`: keys the child claims in a sibling list of the same key space; parent
/// entries with those keys are dropped.
fn merge_list<'a>(
    path: &[&'a str],
    parent: &'a [Value],
    child: &'a [Value],
    taken: &HashSet<String>,
) -> Vec<Value> {
    let rule = list_rule(path);
    let Some(kind) = key_kind(rule, &[parent, child]) else {
        return parent.iter().chain(child).cloned().collect();
    };
    // The last child entry with a key is the one merged (as in Ignition).
    let child_by_key: HashMap<String, &Value> = child
        .iter()
        .filter_map(|entry| Some((key_of(kind, entry)?, entry)))
        .collect();
    let mut parent_keys = HashSet::new();
    let mut result = Vec::with_capacity(parent.len() + child.len());
    for entry in parent {
        let Some(key) = key_of(kind, entry) else {
            result.push(entry.clone());
            continue;
        };
        parent_keys.insert(key.clone());
        if taken.contains(&key) {
            continue;
        }
        match child_by_key.get(&key) {
            None => result.push(entry.clone()),
            Some(override_entry) => {
                let deletes = rule == ListRule::HttpHeaders
                    && override_entry.get("value").is_none_or(Value::is_null);
                if !deletes {
                    result.push(merge_value(path, entry, override_entry));
                }
            }
        }
    }
    for entry in child {
        match key_of(kind, entry) {
            Some(key) if parent_keys.contains(&key) => {}
            _ => result.push(entry.clone()),
        }
    }
    result
}

/// Fail on two entries with the same key in a keyed list or set (across the lists of a shared key
/// space), anywhere in the config.
fn check_duplicates(path: &[&str], value: &Value) -> Result<()> {
    let Some(object) = value.as_object() else {
        return Ok(());
    };
    let shared = shared_key_space(path);
    if !shared.is_empty() {
        let mut seen = HashSet::new();
        for list in shared {
            let list_path: Vec<&str> = path.iter().copied().chain([*list]).collect();
            let entries = object
                .get(*list)
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            check_list(&list_path, &shared.join("/"), entries, &mut seen)?;
        }
    }
    for (key, field) in object {
        let sub_path: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
        match field {
            Value::Object(_) => check_duplicates(&sub_path, field)?,
            Value::Array(entries) => {
                if !shared.contains(&key.as_str()) {
                    check_list(&sub_path, key, entries, &mut HashSet::new())?;
                }
                for entry in entries {
                    check_duplicates(&sub_path, entry)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_list(
    path: &[&str],
    name: &str,
    entries: &[Value],
    seen: &mut HashSet<String>,
) -> Result<()> {
    let rule = list_rule(path);
    if rule == ListRule::Unknown {
        return Ok(());
    }
    let Some(kind) = key_kind(rule, &[entries]) else {
        return Ok(());
    };
    for key in entries.iter().filter_map(|entry| key_of(kind, entry)) {
        if !seen.insert(key.clone()) {
            let shown: String = key.chars().take(80).collect();
            bail!(
                "{} has two entries with the key {shown}",
                describe(path, name)
            );
        }
    }
    Ok(())
}

/// `storage.files/directories/links`, `passwd.users[].sshAuthorizedKeys`, …
fn describe(path: &[&str], name: &str) -> String {
    let mut text = String::new();
    for (i, part) in path[..path.len() - 1].iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        text.push_str(part);
        // The parent of a nested list is itself a list entry when its own path is a list rule.
        if list_rule(&path[..=i]) != ListRule::Unknown {
            text.push_str("[]");
        }
    }
    if !text.is_empty() {
        text.push('.');
    }
    text.push_str(name);
    text
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
