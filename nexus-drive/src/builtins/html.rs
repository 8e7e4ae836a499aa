//! HTML to text or markdown, by a small tag stripper.
//!
//! Not a browser: no DOM, no CSS. It drops what a reader never sees
//! (scripts, styles, comments, the head), turns block elements into line
//! breaks and, for markdown, keeps headings, links, list items, emphasis and
//! code. That is what a model needs from a page, without a parser dependency.

/// Elements whose content is dropped with them.
const HIDDEN: &[&str] = &["script", "style", "noscript", "template", "svg", "head", "iframe", "object"];
/// Elements that start a new line.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "aside",
    "main",
    "table",
    "tr",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "blockquote",
    "form",
    "fieldset",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
];

/// The page as plain text (`markdown == false`) or markdown.
pub(crate) fn convert(html: &str, markdown: bool) -> String {
    let mut out = Writer::default();
    let mut links: Vec<Option<String>> = Vec::new();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.text(&decode_entities(&rest[..lt]));
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            // No tag can close any more: the rest is text.
            out.text(&decode_entities(rest));
            rest = "";
            break;
        };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        let closing = tag.starts_with('/');
        let body = tag.trim_start_matches('/');
        let name: String =
            body.chars().take_while(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
        if name.is_empty() {
            continue; // <!DOCTYPE …>, <?xml …?>
        }
        if !closing && HIDDEN.contains(&name.as_str()) && !body.trim_end().ends_with('/') {
            rest = skip_past_close(rest, &name);
            continue;
        }
        match (name.as_str(), closing) {
            ("br", _) => out.newline(1),
            ("hr", _) => {
                out.newline(2);
                if markdown {
                    out.raw("---");
                }
                out.newline(2);
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", false) => {
                out.newline(2);
                if markdown {
                    let level = name[1..].parse::<usize>().unwrap_or(1);
                    out.raw(&format!("{} ", "#".repeat(level)));
                }
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => out.newline(2),
            ("li", false) => {
                out.newline(1);
                out.raw(if markdown { "- " } else { "• " });
            }
            ("li", true) => out.newline(1),
            ("pre", false) => {
                out.newline(2);
                if markdown {
                    out.raw("```\n");
                }
                out.pre += 1;
            }
            ("pre", true) => {
                out.pre = out.pre.saturating_sub(1);
                if markdown {
                    out.newline(1);
                    out.raw("```");
                }
                out.newline(2);
            }
            ("a", false) => {
                let href = attribute(body, "href").filter(|h| !h.starts_with("javascript:"));
                if markdown && href.is_some() {
                    out.raw("[");
                }
                links.push(href);
            }
            ("a", true) => {
                if let Some(Some(href)) = links.pop() {
                    if markdown {
                        out.raw(&format!("]({href})"));
                    }
                }
            }
            ("img", _) => {
                if let Some(alt) = attribute(body, "alt").filter(|a| !a.is_empty()) {
                    match (markdown, attribute(body, "src")) {
                        (true, Some(src)) => out.raw(&format!("![{alt}]({src})")),
                        _ => out.text(&alt),
                    }
                }
            }
            ("strong" | "b", _) if markdown => out.raw("**"),
            ("em" | "i", _) if markdown => out.raw("*"),
            ("code", _) if markdown && out.pre == 0 => out.raw("`"),
            ("td" | "th", true) => out.raw(" "),
            (block, _) if BLOCKS.contains(&block) || block == "title" => out.newline(2),
            _ => {}
        }
    }
    out.text(&decode_entities(rest));
    out.finish()
}

/// `rest` after the `</name>` that closes a hidden element (or nothing, if none does).
fn skip_past_close<'a>(rest: &'a str, name: &str) -> &'a str {
    let mut from = 0;
    while let Some(found) = rest[from..].find("</") {
        let at = from + found;
        let after = rest.as_bytes().get(at + 2..at + 2 + name.len());
        if after.is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes())) {
            return rest[at..].find('>').map_or("", |gt| &rest[at + gt + 1..]);
        }
        from = at + 2;
    }
    ""
}

/// The value of an attribute in a tag's text, entities decoded.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find(name) {
        let at = from + found;
        from = at + name.len();
        // A whole attribute name: preceded by whitespace, followed by `=`.
        if !lower[..at].ends_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let rest = tag[from..].trim_start();
        let Some(rest) = rest.strip_prefix('=') else {
            continue;
        };
        let rest = rest.trim_start();
        let value = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or(""),
            _ => rest.split(|c: char| c.is_ascii_whitespace() || c == '>').next().unwrap_or(""),
        };
        return Some(decode_entities(value));
    }
    None
}

/// Decodes the common named entities and every numeric one.
pub(crate) fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest.char_indices().take(12).find(|(_, c)| *c == ';').map(|(i, _)| i);
        let decoded = end.and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                "mdash" => Some('—'),
                "ndash" => Some('–'),
                "hellip" => Some('…'),
                "copy" => Some('©'),
                _ => {
                    let num = entity.strip_prefix('#')?;
                    let code = match num.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => num.parse::<u32>().ok()?,
                    };
                    char::from_u32(code)
                }
            }?;
            Some((c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Accumulates output, collapsing whitespace outside `<pre>`.
#[derive(Default)]
struct Writer {
    out: String,
    pre: usize,
    /// Pending line breaks, written before the next text (so trailing ones vanish).
    breaks: usize,
    /// A space is owed before the next word.
    space: bool,
}

impl Writer {
    fn text(&mut self, text: &str) {
        if self.pre > 0 {
            self.flush_breaks();
            self.out.push_str(text);
            return;
        }
        for (i, word) in text.split(|c: char| c.is_whitespace()).enumerate() {
            if i > 0 {
                self.space = true;
            }
            if word.is_empty() {
                continue;
            }
            self.raw(word);
        }
    }

    fn raw(&mut self, s: &str) {
        if self.breaks > 0 {
            self.flush_breaks();
        } else if self.space && !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
            self.out.push(' ');
        }
        self.space = false;
        self.out.push_str(s);
    }

    fn newline(&mut self, n: usize) {
        self.breaks = self.breaks.max(n);
        self.space = false;
    }

    fn flush_breaks(&mut self) {
        if !self.out.is_empty() {
            let have = self.out.chars().rev().take_while(|c| *c == '\n').count();
            for _ in have..self.breaks {
                self.out.push('\n');
            }
        }
        self.breaks = 0;
    }

    fn finish(self) -> String {
        self.out.lines().map(str::trim_end).collect::<Vec<_>>().join("\n").trim().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style></head>\
        <body><h1>Title &amp; more</h1><script>alert('x')</script><p>Some <b>bold</b> and \
        <a href=\"https://example.com/a?b=1&amp;c=2\">a link</a>.</p><ul><li>one</li><li>two</li></ul>\
        <!-- hidden --><p>x&lt;y &#65;&#x42;</p></body></html>";

    #[test]
    fn markdown_keeps_structure_and_drops_what_is_not_read() {
        let md = convert(PAGE, true);
        assert_eq!(
            md,
            "# Title & more\n\nSome **bold** and [a link](https://example.com/a?b=1&c=2).\n\n- one\n- two\n\nx<y AB"
        );
    }

    #[test]
    fn text_has_no_markup() {
        let text = convert(PAGE, false);
        assert_eq!(text, "Title & more\n\nSome bold and a link.\n\n• one\n• two\n\nx<y AB");
    }

    #[test]
    fn random_markup_does_not_panic() {
        // A small deterministic generator over the characters the parser cares about.
        let alphabet: Vec<char> = "<>&;#x/!-\"'=aAbé \nprescript".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..3000 {
            let len = (seed % 40) as usize;
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            let _ = convert(&text, true);
            let _ = convert(&text, false);
        }
    }

    #[test]
    fn broken_markup_does_not_panic() {
        for input in ["<", "<a", "<a href=", "&#xZZ;", "&", "<script>never closed", "<p>é<", "<!--", "&#1114112;"] {
            let _ = convert(input, true);
            let _ = convert(input, false);
        }
    }
}
