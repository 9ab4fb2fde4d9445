//! All command output goes through [`Output`]: a human table by default, JSON with `--json`.

use serde::Serialize;

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// Print JSON for scripts instead of tables.
    pub json: bool,
}

impl Output {
    /// Prints `value` as pretty JSON, or the table `rows` under `headers`.
    pub fn table<T: Serialize + ?Sized>(&self, value: &T, headers: &[&str], rows: Vec<Vec<String>>) {
        if self.json {
            self.print_json(value);
            return;
        }
        if rows.is_empty() {
            println!("(none)");
            return;
        }
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            println!("{}", padded.join("  ").trim_end());
        };
        line(headers.iter().map(|h| h.to_string()).collect());
        for row in rows {
            line(row);
        }
    }

    /// Prints `value` as pretty JSON, or `fields` as aligned `name: value` lines.
    pub fn record<T: Serialize + ?Sized>(&self, value: &T, fields: Vec<(&str, String)>) {
        if self.json {
            self.print_json(value);
            return;
        }
        let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in fields {
            println!("{:<width$}  {v}", format!("{k}:"), width = width + 1);
        }
    }

    /// Prints a one-line confirmation, or `value` as JSON.
    pub fn done<T: Serialize + ?Sized>(&self, value: &T, message: &str) {
        if self.json {
            self.print_json(value);
        } else {
            println!("{message}");
        }
    }

    fn print_json<T: Serialize + ?Sized>(&self, value: &T) {
        println!("{}", serde_json::to_string_pretty(value).expect("output serialises"));
    }
}
