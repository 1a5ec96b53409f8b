//! The walk of one message tree against the compiled plans.

use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};

use super::plan::{FieldPlan, MessagePlan, Plans, Shape};
use super::rules::{FieldCheck, KindCheck, Nanos, check_scalar};
use super::{MAX_DEPTH, MAX_VIOLATIONS, Violation};
use crate::descriptor::descriptor_pool;

/// Map keys are shown in paths up to this many characters.
const MAX_KEY_CHARS: usize = 64;

/// Collects violations while walking; the path is built in place and copied only on failure.
pub(super) struct Walker {
    plans: &'static Plans,
    path: String,
    depth: usize,
    pub(super) violations: Vec<Violation>,
    pub(super) truncated: bool,
}

impl Walker {
    pub(super) fn new() -> Self {
        Walker {
            plans: Plans::get(),
            path: String::new(),
            depth: 0,
            violations: Vec::new(),
            truncated: false,
        }
    }

    fn full(&self) -> bool {
        self.truncated
    }

    fn fail(&mut self, rule: String) {
        if self.violations.len() >= MAX_VIOLATIONS {
            self.truncated = true;
        } else {
            self.violations.push(Violation { path: self.path.clone(), rule });
        }
    }

    fn fail_all(&mut self, rules: Vec<String>) {
        for rule in rules {
            self.fail(rule);
        }
    }

    /// Appends `.name` (or `name` at the root) and returns the length to truncate back to.
    fn push_field(&mut self, name: &str) -> usize {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(name);
        len
    }

    /// Validates `message` and everything under it, `Any` payloads included.
    pub(super) fn message(&mut self, message: &DynamicMessage) {
        if self.full() {
            return;
        }
        let descriptor = message.descriptor();
        if descriptor.full_name() == "google.protobuf.Any" {
            return self.any(message);
        }
        let Some(plan) = self.plans.plan(descriptor.full_name()) else {
            return;
        };
        if self.depth >= MAX_DEPTH {
            self.fail(format!("message nesting deeper than {MAX_DEPTH} levels"));
            return;
        }
        self.depth += 1;
        self.fields(message, plan);
        self.depth -= 1;
    }

    fn fields(&mut self, message: &DynamicMessage, plan: &MessagePlan) {
        for oneof in &plan.required_oneofs {
            if !oneof.fields().any(|field| message.has_field(&field)) {
                let len = self.push_field(oneof.name());
                let names: Vec<String> = oneof.fields().map(|f| f.name().to_owned()).collect();
                self.fail(format!("value is required: set one of {}", names.join(", ")));
                self.path.truncate(len);
            }
        }
        for field in &plan.fields {
            if self.full() {
                return;
            }
            let len = self.push_field(field.field.name());
            self.field(message, field);
            self.path.truncate(len);
        }
    }

    fn field(&mut self, message: &DynamicMessage, plan: &FieldPlan) {
        match plan.shape {
            Shape::Singular => {
                let present = message.has_field(&plan.field);
                // PGV: the rules of a oneof member (or proto3 `optional` field) apply only
                // when it is the member set; `required` included.
                if plan.only_if_set && !present {
                    return;
                }
                if plan.is_message && !present {
                    if plan.check.as_ref().is_some_and(|c| c.required) {
                        self.fail("value is required".to_owned());
                    }
                    return;
                }
                let value = message.get_field(&plan.field);
                self.value(&value, plan.check.as_ref(), plan.visit);
            }
            Shape::List => {
                let value = message.get_field(&plan.field);
                let Some(items) = value.as_list() else {
                    return;
                };
                let repeated = match plan.check.as_ref().and_then(|c| c.kind.as_ref()) {
                    Some(KindCheck::Repeated(repeated)) => Some(&**repeated),
                    _ => None,
                };
                if repeated.is_some_and(|r| r.ignores(items)) {
                    return;
                }
                if let Some(repeated) = repeated {
                    let mut out = Vec::new();
                    repeated.check(items, &mut out);
                    self.fail_all(out);
                }
                let item_check = repeated.and_then(|r| r.items.as_ref());
                if item_check.is_none() && !plan.visit {
                    return;
                }
                for (index, item) in items.iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    let len = self.path.len();
                    self.path.push_str(&format!("[{index}]"));
                    self.value(item, item_check, plan.visit);
                    self.path.truncate(len);
                }
            }
            Shape::Map => {
                let value = message.get_field(&plan.field);
                let Some(map) = value.as_map() else {
                    return;
                };
                let rules = match plan.check.as_ref().and_then(|c| c.kind.as_ref()) {
                    Some(KindCheck::Map(rules)) => Some(&**rules),
                    _ => None,
                };
                if rules.is_some_and(|r| r.ignores(map.len())) {
                    return;
                }
                if let Some(rules) = rules {
                    let mut out = Vec::new();
                    rules.check(map.len(), &mut out);
                    self.fail_all(out);
                }
                let (keys, values) =
                    rules.map_or((None, None), |r| (r.keys.as_ref(), r.values.as_ref()));
                if keys.is_none() && values.is_none() && !plan.visit {
                    return;
                }
                // Sorted keys: the violations come out in the same order on every run.
                let mut entries: Vec<(&MapKey, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    if self.full() {
                        return;
                    }
                    let len = self.path.len();
                    push_key(&mut self.path, key);
                    if let Some(keys) = keys {
                        self.value(&Value::from(key.clone()), Some(keys), false);
                    }
                    self.value(value, values, plan.visit);
                    self.path.truncate(len);
                }
            }
        }
    }

    /// Checks one value (a singular field's, an item, a map key or value) against `check`,
    /// then walks into it if it is a message of an active type.
    fn value(&mut self, value: &Value, check: Option<&FieldCheck>, visit: bool) {
        let Value::Message(message) = value else {
            if let Some(kind) = check.and_then(|c| c.kind.as_ref()) {
                let mut out = Vec::new();
                check_scalar(kind, value, &mut out);
                self.fail_all(out);
            }
            return;
        };
        if let Some(check) = check {
            if let Some(kind) = &check.kind {
                let mut out = Vec::new();
                match kind {
                    KindCheck::Time(bounds) => {
                        let seconds = field_number(message, 1).as_i64().unwrap_or_default();
                        let nanos = field_number(message, 2).as_i32().unwrap_or_default();
                        bounds.check(Nanos::of(seconds, nanos), &mut out);
                    }
                    KindCheck::Any(rules) => {
                        rules
                            .check(field_number(message, 1).as_str().unwrap_or_default(), &mut out);
                    }
                    // The wrapper types (`UInt32Value`, `StringValue`, ...): the scalar rules
                    // apply to the wrapped `value` (field 1).
                    scalar => check_scalar(scalar, &field_number(message, 1), &mut out),
                }
                self.fail_all(out);
            }
            if check.skip {
                return;
            }
        }
        if visit {
            self.message(message);
        }
    }

    /// Walks the payload of an `Any` if the pool knows its type; unknown types are not
    /// validated (they are not an error: custom types may live in another pool).
    fn any(&mut self, any: &DynamicMessage) {
        let type_url = field_number(any, 1);
        let type_url = type_url.as_str().unwrap_or_default();
        let name = type_url.rsplit_once('/').map_or(type_url, |(_, name)| name);
        if self.plans.plan(name).is_none() {
            return;
        }
        let Some(descriptor) = descriptor_pool().get_message_by_name(name) else {
            return;
        };
        let bytes = field_number(any, 2);
        let bytes = bytes.as_bytes().map(|b| b.as_ref()).unwrap_or_default();
        match DynamicMessage::decode(descriptor, bytes) {
            Ok(inner) => self.message(&inner),
            Err(error) => self.fail(format!("cannot decode the {name} payload: {error}")),
        }
    }
}

/// A field's value by number (the well-known types' fields), its default if unknown.
fn field_number(message: &DynamicMessage, number: u32) -> Value {
    message.get_field_by_number(number).map(|v| v.into_owned()).unwrap_or(Value::Bool(false))
}

/// Appends `["key"]` (strings, bounded) or `[key]` to a path.
fn push_key(path: &mut String, key: &MapKey) {
    match key {
        MapKey::String(key) if key.chars().count() > MAX_KEY_CHARS => {
            let head: String = key.chars().take(MAX_KEY_CHARS).collect();
            path.push_str(&format!("[{head:?}...]"));
        }
        MapKey::String(key) => path.push_str(&format!("[{key:?}]")),
        MapKey::Bool(key) => path.push_str(&format!("[{key}]")),
        MapKey::I32(key) => path.push_str(&format!("[{key}]")),
        MapKey::I64(key) => path.push_str(&format!("[{key}]")),
        MapKey::U32(key) => path.push_str(&format!("[{key}]")),
        MapKey::U64(key) => path.push_str(&format!("[{key}]")),
    }
}
