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

/// `values` as a sparkline of block characters, one per value (`▁` for nothing, `█` for the
/// largest), for a table's cell; at most `width` characters: longer series are summed into
/// `width` buckets of as many values each as it takes.
pub fn sparkline(values: &[f64], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = values.len().div_ceil(width.max(1)).max(1);
    let buckets: Vec<f64> = values.chunks(per).map(|chunk| chunk.iter().sum()).collect();
    let top = buckets.iter().copied().fold(0.0, f64::max);
    buckets
        .iter()
        .map(|&v| {
            if top <= 0.0 || v <= 0.0 {
                return BARS[0];
            }
            // Anything above nothing shows above the floor.
            let level = ((v / top) * 7.0).ceil() as usize;
            BARS[level.clamp(1, 7)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sparkline;

    #[test]
    fn a_sparkline_scales_to_its_largest_value_and_fits_its_width() {
        assert_eq!(sparkline(&[0.0, 1.0, 2.0, 4.0, 8.0], 10), "▁▂▃▅█");
        assert_eq!(sparkline(&[0.0, 0.0], 10), "▁▁", "nothing drawn as the floor");
        assert_eq!(sparkline(&[0.01, 100.0], 10), "▂█", "a little shows above nothing");
        // 30 days in 10 characters: three days a character.
        let month: Vec<f64> = (0..30).map(|d| if d < 3 { 1.0 } else { 0.0 }).collect();
        assert_eq!(sparkline(&month, 10), "█▁▁▁▁▁▁▁▁▁");
        assert_eq!(sparkline(&[], 10), "");
    }
}
