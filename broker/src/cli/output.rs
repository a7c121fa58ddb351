//! How the client subcommands print: aligned tables for people, `--format json` for
//! scripts. A `Table` holds JSON values so one value prints either way.

use serde_json::{Map, Value};

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Table,
    Json,
}

/// Rows under a header; column names double as JSON keys (lower case, `_` for spaces).
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<Value>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<Value>) {
        assert_eq!(cells.len(), self.header.len(), "a row has one cell per column");
        self.rows.push(cells);
    }

    pub fn to_json(&self) -> Value {
        let keys: Vec<String> = self.header.iter().map(|h| h.to_lowercase().replace([' ', '-'], "_")).collect();
        let rows = self.rows.iter().map(|row| {
            let object: Map<String, Value> = keys.iter().cloned().zip(row.iter().cloned()).collect();
            Value::Object(object)
        });
        Value::Array(rows.collect())
    }

    pub fn render(&self) -> String {
        let cells: Vec<Vec<String>> = self.rows.iter().map(|r| r.iter().map(cell_text).collect()).collect();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.header).chain(cells.iter()) {
            let padded: Vec<String> = line.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(padded.join("  ").trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table, or its rows as a JSON array.
    pub fn print(&self, format: Format) {
        match format {
            Format::Table => print!("{}", self.render()),
            Format::Json => print_json(&self.to_json()),
        }
    }
}

pub fn cell_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        Value::Array(items) => items.iter().map(cell_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

pub fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// Prints a failed command's message on stderr: `keel: MESSAGE`, or with `--format json`
/// one object `{"error": MESSAGE, "exit_code": N}`, so a script reads either stream as JSON.
pub fn print_error(message: &str, exit_code: i32, format: Format) {
    match format {
        Format::Table => eprintln!("keel: {message}"),
        Format::Json => eprintln!("{}", serde_json::json!({ "error": message, "exit_code": exit_code })),
    }
}

/// What a command that changes something reports: a sentence, or the object in JSON.
pub fn print_done(format: Format, sentence: &str, object: Value) {
    match format {
        Format::Table => println!("{sentence}"),
        Format::Json => print_json(&object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_are_aligned_and_json_keys_follow_the_header() {
        let mut t = Table::new(&["NAME", "LOG START"]);
        t.row(vec![json!("a-long-name"), json!(0)]);
        t.row(vec![json!("b"), json!([1, 2])]);
        assert_eq!(t.render(), "NAME         LOG START\na-long-name  0\nb            1,2\n");
        assert_eq!(t.to_json()[1]["log_start"], json!([1, 2]));
    }
}
