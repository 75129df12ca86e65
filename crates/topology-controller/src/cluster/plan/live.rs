//! Live directives (see [`crd_types::live_config`]): the members whose running values differ
//! from what the spec asks, and what to set on each. Compared in `CONFIG GET`'s form, so a
//! member already at the asked value is left alone and a value set by hand is put back.
//!
//! A member whose version is unknown is skipped until it is known. A spec value of the wrong
//! kind sets nothing here: node-controller refuses to render it (ConfigValid=False on the
//! member), so no pod ever starts with it either.

use crate::cluster::model::{Member, Shape};
use crate::cluster::plan::Step;
use crate::shared::live::live_changes;

/// `Step::SetConfig` for every wanted member that runs a live directive at another value.
pub fn set_live_config(shape: &Shape, members: &[Member]) -> Option<Step> {
    let changes = live_changes(
        &shape.config,
        members.iter().filter(|m| shape.wants(m.at)).map(|m| {
            let running = m.reply.as_ref().and_then(|r| r.live_config.as_ref());
            (m.name.as_str(), running)
        }),
    );
    (!changes.is_empty()).then_some(Step::SetConfig(changes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::*;
    use crate::shared::fake::live_defaults;
    use crate::shared::member_facts::LiveConfig;
    use crd_types::live_config::Version;

    /// Members of a formed cluster running every live directive at its default, but for
    /// the ones every member's config sets (model::member_config).
    fn at_defaults(shards: u32, replicas: u32, version: Version) -> Vec<Member> {
        let mut members = members(&formed(shards, replicas));
        for m in &mut members {
            let mut values = live_defaults(version);
            values.insert("cluster-allow-replica-migration".into(), "no".into());
            values.insert("cluster-node-timeout".into(), "3000".into());
            values.insert("busy-reply-threshold".into(), "2000".into());
            m.reply.as_mut().unwrap().live_config = Some(LiveConfig { version, values });
        }
        members
    }

    #[test]
    fn the_members_own_config_is_the_reference_not_the_template_alone() {
        // Members get replica migration off and shorter timeouts (model::member_config): a
        // server at Valkey's defaults is set, one already there is left alone.
        let mut members = at_defaults(1, 0, Version::new(8, 0));
        assert_eq!(set_live_config(&shape(1, 0), &members), None);
        let running = members[0]
            .reply
            .as_mut()
            .unwrap()
            .live_config
            .as_mut()
            .unwrap();
        running
            .values
            .insert("cluster-allow-replica-migration".into(), "yes".into());
        running
            .values
            .insert("cluster-node-timeout".into(), "15000".into());
        assert_eq!(
            set_live_config(&shape(1, 0), &members),
            Some(Step::SetConfig(vec![(
                "c-0-0".into(),
                vec![
                    ("cluster-allow-replica-migration".into(), "no".into()),
                    ("cluster-node-timeout".into(), "3000".into())
                ]
            )]))
        );
    }

    fn with_config(mut shape: Shape, pairs: &[(&str, &str)]) -> Shape {
        for (k, v) in pairs {
            shape.config.0.insert(k.to_string(), v.to_string());
        }
        shape
    }

    #[test]
    fn nothing_to_set_when_every_member_runs_the_spec() {
        let members = at_defaults(2, 1, Version::new(8, 0));
        assert_eq!(set_live_config(&shape(2, 1), &members), None);
        // Restart-only directives are not this module's business.
        let databases = with_config(shape(2, 1), &[("databases", "4")]);
        assert_eq!(set_live_config(&databases, &members), None);
    }

    #[test]
    fn a_changed_value_is_set_on_every_member_in_config_get_form() {
        let spec = with_config(shape(2, 1), &[("maxmemory", "1gb"), ("maxclients", "500")]);
        let mut members = at_defaults(2, 1, Version::new(8, 0));
        // One member already has it (set by an earlier, interrupted step).
        let first = members[0]
            .reply
            .as_mut()
            .unwrap()
            .live_config
            .as_mut()
            .unwrap();
        first.values.insert("maxmemory".into(), "1073741824".into());
        first.values.insert("maxclients".into(), "500".into());
        match set_live_config(&spec, &members) {
            Some(Step::SetConfig(changes)) => {
                let names: Vec<&str> = changes.iter().map(|(m, _)| m.as_str()).collect();
                assert_eq!(names, ["c-0-1", "c-1-0", "c-1-1"]);
                assert_eq!(
                    changes[0].1,
                    [
                        ("maxclients".to_string(), "500".to_string()),
                        ("maxmemory".to_string(), "1073741824".to_string())
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_directive_removed_from_the_spec_goes_back_to_its_default() {
        let mut members = at_defaults(1, 0, Version::new(8, 0));
        let running = members[0]
            .reply
            .as_mut()
            .unwrap()
            .live_config
            .as_mut()
            .unwrap();
        running
            .values
            .insert("maxmemory-policy".into(), "allkeys-lru".into());
        // maxclients has no default to go back to: Valkey fits it to the open-file limit.
        running.values.insert("maxclients".into(), "4064".into());
        assert_eq!(
            set_live_config(&shape(1, 0), &members),
            Some(Step::SetConfig(vec![(
                "c-0-0".into(),
                vec![("maxmemory-policy".into(), "noeviction".into())]
            )]))
        );
    }

    #[test]
    fn versions_decide_what_is_live_and_unknown_ones_wait() {
        let spec = with_config(shape(1, 1), &[("io-threads", "4")]);
        let mut members = at_defaults(1, 1, Version::new(9, 1));
        // On 8.x io-threads is read only at start: that member rolls instead.
        members[1] = at_defaults(1, 1, Version::new(8, 1)).remove(1);
        assert_eq!(
            set_live_config(&spec, &members),
            Some(Step::SetConfig(vec![(
                "c-0-0".into(),
                vec![("io-threads".into(), "4".into())]
            )]))
        );
        // A member that could not report its config is left for the next look.
        members[0].reply.as_mut().unwrap().live_config = None;
        assert_eq!(set_live_config(&spec, &members), None);
    }

    #[test]
    fn a_value_of_the_wrong_kind_sets_nothing() {
        let spec = with_config(shape(1, 0), &[("maxmemory", "plenty")]);
        assert_eq!(
            set_live_config(&spec, &at_defaults(1, 0, Version::new(8, 0))),
            None
        );
    }
}
