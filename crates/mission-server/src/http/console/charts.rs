//! Charts the console draws on the server, as SVG in the page (no script, nothing inline the
//! content security policy would refuse: geometry is attributes, colours the stylesheet's).

use std::fmt::Write;

use chrono::NaiveDate;

/// How wide and tall a chart is drawn, in its own units (it stretches to its box, so it holds
/// no text: its caption and dates are the page's).
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 100.0;

/// A bar chart of `values`, one bar a day (`days[i]`'s is `values[i]`), named `title` (its
/// accessible name), with `unit` after each bar's figure in its tooltip.
pub fn daily_bars(id: &str, title: &str, unit: &str, days: &[NaiveDate], values: &[f64]) -> String {
    let top = values.iter().copied().fold(0.0, f64::max);
    let n = days.len().max(1) as f64;
    let slot = WIDTH / n;
    let plot = HEIGHT - 1.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" id="{id}" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" aria-label="{title}: {total} {unit} in all, at most {top} a day"><title>{title}</title>"#,
        total = figure(values.iter().sum()),
        top = figure(top),
    );
    for (i, (day, value)) in days.iter().zip(values).enumerate() {
        let height = if top > 0.0 { value / top * (plot - 2.0) } else { 0.0 };
        let _ = write!(
            svg,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{height:.2}" data-day="{day}" data-value="{value}"><title>{day}: {figure} {unit}</title></rect>"#,
            x = i as f64 * slot + slot * 0.1,
            y = plot - height,
            w = slot * 0.8,
            figure = figure(*value),
        );
    }
    let _ = write!(svg, r#"<line class="axis" x1="0" y1="{plot}" x2="{WIDTH}" y2="{plot}"/>"#);
    svg.push_str("</svg>");
    svg
}

/// A figure as a chart's tooltip, name and caption say it: three significant digits or so.
pub fn figure(value: f64) -> String {
    match value.abs() {
        0.0 => "0".to_owned(),
        v if v >= 100.0 => format!("{value:.0}"),
        v if v >= 1.0 => format!("{value:.2}"),
        v if v >= 0.001 => format!("{value:.3}").trim_end_matches('0').to_owned(),
        _ => format!("{value:.1e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_a_day_measured_against_the_largest() {
        let first = NaiveDate::from_ymd_opt(2026, 11, 1).unwrap();
        let days: Vec<NaiveDate> = first.iter_days().take(3).collect();
        let svg = daily_bars("kwh", "kWh a day", "kWh", &days, &[0.0, 2.0, 1.0]);
        assert!(svg.starts_with(r#"<svg class="chart" id="kwh" role="img""#), "{svg}");
        assert!(svg.contains(r#"aria-label="kWh a day: 3.00 kWh in all, at most 2.00 a day""#), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains(r#"height="0.00" data-day="2026-11-01""#), "{svg}");
        assert!(svg.contains(r#"y="2.00" width="160.00" height="97.00" data-day="2026-11-02""#), "{svg}");
        assert!(svg.contains("<title>2026-11-03: 1.00 kWh</title>"), "{svg}");
        assert!(svg.ends_with(r#"<line class="axis" x1="0" y1="99" x2="600" y2="99"/></svg>"#), "{svg}");
    }
}
