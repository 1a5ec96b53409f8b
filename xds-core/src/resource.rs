//! What the core needs to know about resources: a handle with a name and a version, and a view
//! of the current resources of one type.

/// A resource handle as the protocol core sees it.
///
/// The core never looks inside a resource: it compares versions and hands the handle back in the
/// responses it computes. Make the handle cheap to clone (an `Arc`), so that building a response
/// copies pointers, not resources. It is `Send`, as a stream's state (and the responses it has
/// computed) moves between the threads of whatever runtime drives it.
pub trait Resource: Clone + Send {
    /// The resource's name.
    fn name(&self) -> &str;
    /// The resource's version: equal versions mean equal content (rules D4, S16).
    fn version(&self) -> &str;

    /// The name as a shared string. The core keys what each client holds by name; a handle that
    /// already owns its name behind an `Arc` (as the caches' do) lets every stream share it
    /// instead of copying it per client.
    fn shared_name(&self) -> std::sync::Arc<str> {
        std::sync::Arc::from(self.name())
    }

    /// How long a client may keep the resource without hearing of it again (`Resource.ttl`).
    /// A sub-stream holding such resources owes the client a heartbeat before that time runs out
    /// (see `poll_heartbeat`).
    fn ttl(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The current resources of one type, as one stream sees them (its node's group, its type).
///
/// A view is a snapshot in time: the core reads it while computing one response and does not keep
/// it. `revision` and `changed_since` let the core find what changed since it last looked without
/// walking every resource (a view that cannot tell simply returns `false` from `changed_since`, and
/// the core compares the whole subscription instead).
pub trait View {
    /// The resource handle.
    type Resource: Resource;

    /// Whether the view has data to serve. A view that is not ready (a node group whose first
    /// snapshot is not set yet) owes nothing: no response is computed from it, so a client is never
    /// told that everything was deleted because the server had not yet loaded its configuration.
    fn is_ready(&self) -> bool {
        true
    }

    /// A number that grows whenever a resource of the view is created, changed or deleted.
    fn revision(&self) -> u64;

    /// The type's version for SotW responses (`version_info`): the same resources give the same
    /// version (rule S16).
    fn version(&self) -> String;

    /// The resource with this name, if it exists.
    fn get(&self, name: &str) -> Option<Self::Resource>;

    /// The resource an alias subscription names (rule D9: VHDS `<route configuration>/<host>`),
    /// if one matches. Views of types without aliases keep the default.
    fn resolve_alias(&self, alias: &str) -> Option<Self::Resource> {
        let _ = alias;
        None
    }

    /// Why the resource `name` cannot be served, if a cache or its user said so (rule C4): sent
    /// once in `resource_errors` to clients subscribed to `name` while it does not exist (for a
    /// wildcard subscription, the error of `*`). An error for a resource that exists is not sent:
    /// the resource is. A view that reports changes should report a name whose error changed in
    /// [`changed_since`](Self::changed_since), so that streams look at it again.
    fn resource_error(&self, name: &str) -> Option<crate::message::ErrorDetail> {
        let _ = name;
        None
    }

    /// Calls `f` with every resource, for wildcard subscriptions.
    fn for_each(&self, f: &mut dyn FnMut(&Self::Resource));

    /// Calls `f` with the name of every resource created, changed or deleted after `revision`
    /// (a name may be reported that in the end did not change). Returns `false`, having called
    /// nothing, when the view cannot tell (the revision is too old or from another source); the core
    /// then compares the whole subscription.
    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        let _ = (revision, f);
        false
    }
}

/// How the protocol treats a resource type: the columns of the resource-type table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeTraits {
    /// Clients may subscribe to every resource of the type (rules S10, D8): Listener, Cluster.
    pub wildcard_capable: bool,
    /// SotW responses carry every subscribed resource (rule S11): Listener, Cluster.
    pub full_state: bool,
    /// Clients may subscribe by alias (rule D9): VirtualHost.
    pub aliases: bool,
}
