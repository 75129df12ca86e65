//! Planner rule (layer 4): the template's image reaches no member (no roll gate opens) while
//! its Valkey version, read from the image tag, could not take over the members' data or
//! would refuse to start with the config. Shared by both topologies; an image whose tag names
//! no version is not judged (the running servers report theirs once it runs).

use crd_types::conditions::reasons::Waiting;
use crd_types::config::ValkeyConfig;
use crd_types::versions::{self, Version};

/// Why the roll must not start on `image` for members that run `running` (`(member,
/// version)`, those that answered), with the reason to wait under.
pub fn refuse(
    image: &str,
    config: &ValkeyConfig,
    running: &[(&str, Version)],
) -> Option<(Waiting, String)> {
    let target = Version::of_image(image)?;
    let versions: Vec<Version> = running.iter().map(|(_, v)| *v).collect();
    if let Some(why) = versions::refuse_target(target, &versions) {
        let newest = versions.iter().max().copied().unwrap_or(target);
        let on_newest: Vec<&str> = running
            .iter()
            .filter(|(_, v)| *v == newest)
            .map(|(name, _)| *name)
            .collect();
        let how = format!(
            "set the image back to Valkey {newest} or newer to go on ({} run {newest}); data \
             moves to an older version only through a backup loaded into a new topology",
            on_newest.join(", ")
        );
        return Some((
            Waiting::VersionRefused,
            format!("{image} is not rolled out: {why}; no member restarts on it: {how}"),
        ));
    }
    let unknown = versions::unknown_directives(config, target)?;
    (!unknown.is_empty()).then(|| {
        (
            Waiting::DirectiveUnknown,
            format!(
                "the config is not rolled out: {}",
                versions::describe_unknown(&unknown, target, image)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(names: &[&str]) -> ValkeyConfig {
        ValkeyConfig(
            names
                .iter()
                .map(|n| (n.to_string(), "1".to_string()))
                .collect(),
        )
    }

    #[test]
    fn downgrades_past_the_data_format_wait_naming_the_members_and_the_way_on() {
        let v = Version::new;
        let running = [("c-0-0", v(9, 1)), ("c-0-1", v(8, 1)), ("c-1-0", v(9, 1))];
        let (reason, why) = refuse("valkey/valkey:8.1", &config(&[]), &running).unwrap();
        assert_eq!(reason, Waiting::VersionRefused);
        assert!(
            why.starts_with("valkey/valkey:8.1 is not rolled out: Valkey 8.1 cannot read"),
            "{why}"
        );
        assert!(
            why.contains("set the image back to Valkey 9.1 or newer"),
            "{why}"
        );
        assert!(why.contains("(c-0-0, c-1-0 run 9.1)"), "{why}");
        // Upgrades, same-format moves and unversioned tags go on.
        assert_eq!(refuse("valkey/valkey:9.1", &config(&[]), &running), None);
        assert_eq!(
            refuse("valkey/valkey:8.0", &config(&[]), &running[1..2]),
            None
        );
        assert_eq!(refuse("valkey/valkey:latest", &config(&[]), &running), None);
        // An image whose tag is no Valkey version (bad_input's "no-such/valkey:1.0").
        assert_eq!(refuse("no-such/valkey:1.0", &config(&[]), &running), None);
    }

    #[test]
    fn directives_the_target_version_lacks_wait() {
        let running = [("c-0-0", Version::new(8, 0))];
        let too_new = config(&["maxmemory", "commandlog-slow-execution-max-len"]);
        let (reason, why) = refuse("valkey/valkey:8.0", &too_new, &running).unwrap();
        assert_eq!(reason, Waiting::DirectiveUnknown);
        assert!(
            why.starts_with("the config is not rolled out: valkey/valkey:8.0 runs Valkey 8.0, which does not know commandlog-slow-execution-max-len"),
            "{why}"
        );
        assert_eq!(refuse("valkey/valkey:8.1", &too_new, &running), None);
        // A version not measured is not judged.
        assert_eq!(
            refuse("valkey/valkey:9.0", &config(&["nonsense"]), &running),
            None
        );
    }
}
