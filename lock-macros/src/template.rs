//! The key template: `"stock:{sku}"`, `"order:{order.id}:{user.id}"`,
//! `{{`/`}}` for literal braces. `#[leader_only]`'s `election` and `value`
//! are templates of the same form.

use syn::LitStr;

/// One piece of a key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text copied into the key as is (braces already unescaped).
    Text(String),
    /// `{name.field.field}`: an argument (or `self`) and a field path.
    Field(Vec<String>),
}

/// Which option a template is, for its error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TemplateKind {
    /// `#[distributed_lock(key = "...")]`: "the key template".
    Key,
    /// `#[leader_only(election = "...")]`: "the election template".
    Election,
    /// `#[leader_only(value = "...")]`: "the value template".
    Value,
}

impl TemplateKind {
    /// The option's word in "the ... template": `key`, `election`, `value`.
    pub(crate) fn word(self) -> &'static str {
        match self {
            TemplateKind::Key => "key",
            TemplateKind::Election => "election",
            TemplateKind::Value => "value",
        }
    }

    fn empty(self) -> &'static str {
        match self {
            TemplateKind::Key => "the lock key must not be empty",
            TemplateKind::Election => "the election name must not be empty",
            TemplateKind::Value => "the leader value must not be empty",
        }
    }
}

/// A parsed `key = "..."` template (or `election = "..."`, `value = "..."`).
#[derive(Debug, Clone)]
pub(crate) struct KeyTemplate {
    pub(crate) lit: LitStr,
    pub(crate) segments: Vec<Segment>,
    pub(crate) kind: TemplateKind,
}

impl KeyTemplate {
    /// Parses the key template; a malformed one is an error on the literal.
    pub(crate) fn parse(lit: &LitStr) -> syn::Result<Self> {
        Self::parse_as(lit, TemplateKind::Key)
    }

    /// Parses a template of the option `kind`.
    pub(crate) fn parse_as(lit: &LitStr, kind: TemplateKind) -> syn::Result<Self> {
        let segments =
            parse_segments(&lit.value(), kind).map_err(|msg| syn::Error::new_spanned(lit, msg))?;
        Ok(KeyTemplate {
            lit: lit.clone(),
            segments,
            kind,
        })
    }

    /// The placeholders, in order of appearance.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &[String]> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Field(path) => Some(path.as_slice()),
            Segment::Text(_) => None,
        })
    }

    /// The template as a `format!` string: text with braces escaped again,
    /// `{}` for each placeholder.
    pub(crate) fn format_string(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Segment::Field(_) => out.push_str("{}"),
            }
        }
        out
    }
}

const PLACEHOLDER_HELP: &str =
    "placeholders name an argument and optional fields, like `{sku}` or `{order.id}`";

fn parse_segments(template: &str, kind: TemplateKind) -> Result<Vec<Segment>, String> {
    let word = kind.word();
    if template.is_empty() {
        return Err(kind.empty().into());
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '}' => {
                return Err(format!(
                    "unmatched `}}` in the {word} template; write `}}}}` for a literal `}}`"
                ))
            }
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => {
                            return Err(format!(
                                "unclosed `{{` in the {word} template; write `{{{{` for a \
                                 literal `{{`"
                            ))
                        }
                    }
                }
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Field(parse_path(&inner, word)?));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(segments)
}

/// `name.field.0` → ["name", "field", "0"].
fn parse_path(inner: &str, word: &str) -> Result<Vec<String>, String> {
    if inner.trim().is_empty() {
        return Err(format!(
            "empty placeholder `{{}}` in the {word} template; {PLACEHOLDER_HELP}"
        ));
    }
    let parts: Vec<String> = inner.split('.').map(str::to_owned).collect();
    for (i, part) in parts.iter().enumerate() {
        let ok = if i == 0 {
            is_identifier(part)
        } else {
            is_identifier(part) || is_tuple_index(part)
        };
        if !ok {
            return Err(format!(
                "invalid placeholder `{{{inner}}}` in the {word} template; {PLACEHOLDER_HELP} \
                 (format specs are not supported: the {word} uses `Display`)"
            ));
        }
    }
    Ok(parts)
}

/// `0`, `1`, ... as a tuple field: no sign, no leading zero, fits a `u32`.
fn is_tuple_index(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
        && s.parse::<u32>().is_ok()
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_ascii_alphabetic() => {
            s != "_" && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(path: &[&str]) -> Segment {
        Segment::Field(path.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(
            parse_segments("order:{order.id}:{user.id}", TemplateKind::Key),
            Ok(vec![
                Segment::Text("order:".into()),
                field(&["order", "id"]),
                Segment::Text(":".into()),
                field(&["user", "id"]),
            ])
        );
        assert_eq!(
            parse_segments("{pair.0}", TemplateKind::Key),
            Ok(vec![field(&["pair", "0"])])
        );
        assert_eq!(
            parse_segments("nightly-report", TemplateKind::Key),
            Ok(vec![Segment::Text("nightly-report".into())])
        );
    }

    #[test]
    fn double_braces_are_literal() {
        assert_eq!(
            parse_segments("{{tag}}:{id}", TemplateKind::Key),
            Ok(vec![Segment::Text("{tag}:".into()), field(&["id"])])
        );
        let lit = LitStr::new("{{tag}}:{id}", proc_macro2::Span::call_site());
        let template = KeyTemplate::parse(&lit).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(template.format_string(), "{{tag}}:{}");
    }

    #[test]
    fn malformed_templates_are_errors() {
        for bad in [
            "",
            "{",
            "a}",
            "{}",
            "{ }",
            "{a.}",
            "{.a}",
            "{a:?}",
            "{0}",
            "{a-b}",
            "{a",
            "{_}",
            "{a.01}",
            "{a.99999999999}",
            "{a.-1}",
            "{r#type}",
            "{a.b c}",
            "{é}",
        ] {
            assert!(parse_segments(bad, TemplateKind::Key).is_err(), "{bad:?}");
        }
    }
}
