//! The node role, as `--role` passes it and the service's host model carries it (swagger
//! `host-role`).

use crate::wire::wire_enum;

wire_enum! {
    /// A host's role. The Go installer treats only `bootstrap` (the HA bootstrap pre-phase, then
    /// it installs as a master) and `worker` (waits for the control plane) specially; any other
    /// role, `arbiter` or one it does not know, takes the master path, but keeps its own name in
    /// the `Starting installation`/`Installing` reports and the Ignition file name
    /// (`<role>-<hostID>.ign`), and skips the registry copy, which needs `master`. Kept as is:
    /// an unknown role is an [`Role::Other`], not an error.
    #[derive(Default)]
    pub enum Role: open {
        AutoAssign = "auto-assign",
        #[default]
        Master = "master",
        Arbiter = "arbiter",
        Worker = "worker",
        Bootstrap = "bootstrap",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_match_swagger_host_role() {
        let wire: Vec<&str> = Role::KNOWN.iter().map(Role::as_str).collect();
        assert_eq!(
            wire,
            ["auto-assign", "master", "arbiter", "worker", "bootstrap"]
        );
        for role in Role::KNOWN {
            assert_eq!(Role::from(role.as_str()), role);
        }
    }
}
