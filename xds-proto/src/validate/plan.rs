//! Per-message validation plans, compiled once for the whole descriptor pool.
//!
//! Reading a field's `validate.rules` means decoding its options and compiling regexes: done
//! once per field of the pool on first use, never per validated message. The plans also record
//! which message types can report anything at all ("active": they carry a rule, hold an `Any`,
//! or reach such a type), so the walker never descends into a sub-tree that cannot fail
//! (a `Duration`, a `Struct`, most of the matcher tree).

use std::collections::HashMap;
use std::sync::OnceLock;

use prost_reflect::{
    DescriptorPool, DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MessageDescriptor,
    OneofDescriptor, Value,
};

use super::rules::FieldCheck;
use crate::pb::validate::FieldRules;

/// How a field holds its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Singular,
    List,
    Map,
}

/// What to do with one field of a message.
#[derive(Debug)]
pub(super) struct FieldPlan {
    pub(super) field: FieldDescriptor,
    pub(super) shape: Shape,
    /// The (singular) field is a message: rules apply only when it is set.
    pub(super) is_message: bool,
    /// A oneof member or proto3 `optional` field: rules apply only when it is set.
    pub(super) only_if_set: bool,
    pub(super) check: Option<FieldCheck>,
    /// The field's messages (items, map values) are of an active type: walk into them.
    pub(super) visit: bool,
}

/// What to do with one message type.
#[derive(Debug, Default)]
pub(super) struct MessagePlan {
    /// Fields with rules or leading to active types, in field-number order.
    pub(super) fields: Vec<FieldPlan>,
    /// `(validate.required) = true` oneofs.
    pub(super) required_oneofs: Vec<OneofDescriptor>,
}

/// Every message's plan, for [`crate::descriptor_pool`].
#[derive(Debug)]
pub(super) struct Plans {
    /// Only active message types have an entry.
    by_name: HashMap<Box<str>, MessagePlan>,
}

impl Plans {
    /// The plans of the crate's pool, compiled on first use.
    pub(super) fn get() -> &'static Plans {
        static PLANS: OnceLock<Plans> = OnceLock::new();
        PLANS.get_or_init(|| Plans::compile(crate::descriptor_pool()))
    }

    /// The plan of `message`, `None` when no instance of it can break a rule.
    pub(super) fn plan(&self, message: &str) -> Option<&MessagePlan> {
        self.by_name.get(message)
    }

    fn compile(pool: &DescriptorPool) -> Plans {
        let ext = Extensions::of(pool);
        let mut base: HashMap<Box<str>, MessagePlan> = HashMap::new();
        // Message types validation never looks into (`validate.disabled` / `validate.ignored`).
        let mut off: std::collections::HashSet<Box<str>> = Default::default();
        for message in pool.all_messages() {
            if ext.disabled(&message) {
                off.insert(message.full_name().into());
                continue;
            }
            base.insert(message.full_name().into(), ext.plan(&message));
        }
        // Fixpoint: a type is active if it has a rule, is an `Any`, or has a field of an
        // active message type.
        let mut active: std::collections::HashSet<Box<str>> = base
            .iter()
            .filter(|(name, plan)| {
                &***name == "google.protobuf.Any"
                    || !plan.required_oneofs.is_empty()
                    || plan.fields.iter().any(|f| f.check.is_some())
            })
            .map(|(name, _)| name.clone())
            .collect();
        loop {
            let before = active.len();
            for (name, plan) in &base {
                if active.contains(name) {
                    continue;
                }
                if plan.fields.iter().any(|f| {
                    element_message(&f.field).is_some_and(|m| active.contains(m.full_name()))
                }) {
                    active.insert(name.clone());
                }
            }
            if active.len() == before {
                break;
            }
        }
        let mut by_name = HashMap::with_capacity(active.len());
        for (name, mut plan) in base {
            if !active.contains(&name) {
                continue;
            }
            plan.fields.retain_mut(|f| {
                let skip = f.check.as_ref().is_some_and(|c| c.skip);
                f.visit = !skip
                    && element_message(&f.field).is_some_and(|m| active.contains(m.full_name()));
                f.visit || f.check.is_some()
            });
            by_name.insert(name, plan);
        }
        Plans { by_name }
    }
}

/// The message type of a field's values: the field's own, a list's items', a map's values'.
fn element_message(field: &FieldDescriptor) -> Option<MessageDescriptor> {
    let Kind::Message(message) = field.kind() else {
        return None;
    };
    if field.is_map() {
        return match message.map_entry_value_field().kind() {
            Kind::Message(value) => Some(value),
            _ => None,
        };
    }
    Some(message)
}

/// PGV's option extensions, as known to the pool (all absent from a pool without
/// `validate/validate.proto`, which then validates nothing).
struct Extensions {
    rules: Option<ExtensionDescriptor>,
    disabled: Option<ExtensionDescriptor>,
    ignored: Option<ExtensionDescriptor>,
    required: Option<ExtensionDescriptor>,
}

impl Extensions {
    fn of(pool: &DescriptorPool) -> Self {
        Extensions {
            rules: pool.get_extension_by_name("validate.rules"),
            disabled: pool.get_extension_by_name("validate.disabled"),
            ignored: pool.get_extension_by_name("validate.ignored"),
            required: pool.get_extension_by_name("validate.required"),
        }
    }

    fn disabled(&self, message: &MessageDescriptor) -> bool {
        let options = message.options();
        [&self.disabled, &self.ignored].into_iter().flatten().any(|ext| flag(&options, ext))
    }

    /// Every field with rules or of a message type; `visit` is settled by the caller.
    fn plan(&self, message: &MessageDescriptor) -> MessagePlan {
        let mut fields = Vec::new();
        for field in message.fields() {
            let check =
                self.field_rules(&field).map(|rules| FieldCheck::compile(&rules, &field.kind()));
            let is_message = matches!(field.kind(), Kind::Message(_));
            if check.is_none() && !is_message {
                continue;
            }
            let shape = if field.is_map() {
                Shape::Map
            } else if field.is_list() {
                Shape::List
            } else {
                Shape::Singular
            };
            fields.push(FieldPlan {
                only_if_set: field.containing_oneof().is_some(),
                is_message: shape == Shape::Singular && is_message,
                field,
                shape,
                check,
                visit: false,
            });
        }
        let required_oneofs = message
            .oneofs()
            .filter(|oneof| !oneof.is_synthetic())
            .filter(|oneof| self.required.as_ref().is_some_and(|ext| flag(&oneof.options(), ext)))
            .collect();
        MessagePlan { fields, required_oneofs }
    }

    fn field_rules(&self, field: &FieldDescriptor) -> Option<FieldRules> {
        let ext = self.rules.as_ref()?;
        let options = field.options();
        if !options.has_extension(ext) {
            return None;
        }
        match &*options.get_extension(ext) {
            Value::Message(rules) => rules.transcode_to::<FieldRules>().ok(),
            _ => None,
        }
    }
}

/// A `bool` option extension set to true.
fn flag(options: &DynamicMessage, ext: &ExtensionDescriptor) -> bool {
    options.has_extension(ext) && options.get_extension(ext).as_bool() == Some(true)
}
