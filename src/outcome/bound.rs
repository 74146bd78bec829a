//! Bounding what a run hands back. The guest's report and output are untrusted: whatever it sent,
//! the host cuts it here before any front end formats it, measuring text as it will be sent (escaped
//! inside a JSON string), since a control character costs six bytes there.

use super::{Outcome, RunResult};

/// Room kept in a cut field for its notice (the longest notice, escaped, is shorter).
const NOTICE_RESERVE: usize = 160;

/// Bytes each byte of UTF-8 text takes inside a JSON string as `serde_json` writes it: `"`, `\`
/// and the control characters with a short escape take 2, the other control characters 6
/// (`\u001b`), every other byte itself (so a character takes its UTF-8 length).
const JSON_BYTES: [u8; 256] = {
    let mut table = [1; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = 6;
        b += 1;
    }
    let short = [b'"', b'\\', b'\n', b'\r', b'\t', 0x08, 0x0c];
    let mut i = 0;
    while i < short.len() {
        table[short[i] as usize] = 2;
        i += 1;
    }
    table
};

/// Bytes `c` takes inside a JSON string.
pub fn json_len_char(c: char) -> usize {
    c.encode_utf8(&mut [0; 4])
        .bytes()
        .map(|b| usize::from(JSON_BYTES[usize::from(b)]))
        .sum()
}

/// Bytes `s` takes inside a JSON string, without the quotes.
pub fn json_len(s: &str) -> usize {
    json_len_capped(s, usize::MAX)
}

/// [`json_len`], or `cap` if that is less: reads no further than `cap` bytes of JSON, so that
/// measuring tens of megabytes against a small budget stays quick (even unoptimised, in tests).
fn json_len_capped(s: &str, cap: usize) -> usize {
    let bytes = s.as_bytes();
    let mut len = 0;
    let mut i = 0;
    while i < bytes.len() && len < cap {
        len += JSON_BYTES[bytes[i] as usize] as usize;
        i += 1;
    }
    len.min(cap)
}

/// Cuts `text` to at most `budget` bytes as JSON, notice included; below [`NOTICE_RESERVE`], to
/// at most that (the notice alone, or the text if it is no longer). What is cut is replaced by a
/// notice saying how much went: from the middle (keeping the start and the end, where a traceback
/// has its last frames) or from the end.
pub fn cut_to(text: &mut String, budget: usize, keep_end: bool) {
    let allowed = budget.max(NOTICE_RESERVE);
    if json_len_capped(text, allowed + 1) <= allowed {
        return;
    }
    let keep = budget.saturating_sub(NOTICE_RESERVE);
    let tail_budget = if keep_end { keep / 2 } else { 0 };
    let head_end = prefix_within(text, keep - tail_budget);
    let tail_start = head_end + suffix_start_within(&text[head_end..], tail_budget);
    let cut = &text[head_end..tail_start];
    let notice = format!(
        "\n[... {} characters ({} bytes) cut here to keep the reply within the output limit ...]\n",
        cut.chars().count(),
        cut.len()
    );
    text.replace_range(head_end..tail_start, &notice);
}

/// The end of the longest prefix of `text` that takes at most `budget` bytes as JSON.
pub fn prefix_within(text: &str, budget: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += json_len_char(c);
        if used > budget {
            return i;
        }
    }
    text.len()
}

/// The start of the longest suffix of `text` that takes at most `budget` bytes as JSON.
fn suffix_start_within(text: &str, budget: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices().rev() {
        used += json_len_char(c);
        if used > budget {
            return i + c.len_utf8();
        }
    }
    0
}

/// Splits `budget` between items of the given sizes: an item that fits in an equal share keeps
/// all of it, and what it leaves unused is shared among the bigger ones.
fn fair_shares(sizes: &[usize], budget: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let mut shares = vec![0; sizes.len()];
    let mut left = budget;
    for (k, &i) in order.iter().enumerate() {
        shares[i] = sizes[i].min(left / (sizes.len() - k));
        left -= shares[i];
    }
    shares
}

impl RunResult {
    /// The text fields of a result together take at most this share of the output limit once
    /// escaped as JSON: half, because an MCP reply carries them twice (text and structured content).
    pub fn text_budget(max_output_bytes: usize) -> usize {
        max_output_bytes / 2
    }

    /// Cuts the output, the result's `repr`, the exception's type, message and traceback and a
    /// trap's message so that together, escaped as JSON, they fit [`RunResult::text_budget`]
    /// (plus a notice per cut field when the budget is too small to hold the notices). Fields that
    /// fit an equal share are kept whole; each longer one loses its middle, with a notice.
    pub fn bound(&mut self, max_output_bytes: usize) {
        let budget = Self::text_budget(max_output_bytes);
        let mut fields = self.texts_mut();
        // Any size over the whole budget gets the same share: measure no further.
        let sizes: Vec<usize> = fields
            .iter()
            .map(|f| json_len_capped(f, budget + 1))
            .collect();
        let shares = fair_shares(&sizes, budget);
        for (field, share) in fields.iter_mut().zip(shares) {
            cut_to(field, share, true);
        }
    }

    fn texts_mut(&mut self) -> Vec<&mut String> {
        let mut fields = vec![&mut self.stdout, &mut self.stderr];
        match &mut self.outcome {
            Outcome::Completed { result } => fields.extend(result.as_mut()),
            Outcome::Raised(e) | Outcome::LimitReached { error: Some(e), .. } => {
                fields.extend([&mut e.kind, &mut e.message, &mut e.traceback])
            }
            Outcome::LimitReached { error: None, .. } => {}
            Outcome::Trapped { message } => fields.push(message),
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{PythonError, Stats};

    /// Bytes `s` takes in JSON according to serde_json itself, quotes left out.
    fn serde_len(s: &str) -> usize {
        serde_json::to_string(s).unwrap().len() - 2
    }

    #[test]
    fn json_lengths_are_serde_jsons() {
        for c in (0..=0x10FFFF).filter_map(char::from_u32) {
            assert_eq!(json_len_char(c), serde_len(&c.to_string()), "{c:?}");
        }
        let mixed = "a\"\\\u{1b}\n\u{7f}é☃🦀\u{0}";
        assert_eq!(json_len(mixed), serde_len(mixed));
    }

    #[test]
    fn a_cut_keeps_both_ends_says_what_went_and_fits() {
        let mut text = format!("START{}END", "\u{1b}".repeat(100_000));
        cut_to(&mut text, 1000, true);
        assert!(json_len(&text) <= 1000, "{}", json_len(&text));
        assert!(
            text.starts_with("START") && text.ends_with("END"),
            "{text:?}"
        );
        let cut = 100_000 - (text.matches('\u{1b}').count());
        assert!(
            text.contains(&format!("[... {cut} characters ({cut} bytes) cut here")),
            "{text:?}"
        );

        let mut text = "é".repeat(10_000);
        cut_to(&mut text, 500, false);
        assert!(json_len(&text) <= 500);
        assert!(
            text.starts_with('é') && text.ends_with("...]\n"),
            "{text:?}"
        );

        // Text that fits is left alone, and a budget too small for the notice leaves only it.
        let mut short = "fits".to_owned();
        cut_to(&mut short, 4, true);
        assert_eq!(short, "fits");
        let mut tiny = "x".repeat(500);
        cut_to(&mut tiny, 10, true);
        assert!(tiny.starts_with("\n[... 500 characters"), "{tiny:?}");
        let mut shorter_than_a_notice = "x".repeat(50);
        cut_to(&mut shorter_than_a_notice, 10, true);
        assert_eq!(shorter_than_a_notice.len(), 50);
    }

    #[test]
    fn the_longest_notice_fits_its_reserve() {
        let mut text = "\u{0}".repeat(1000);
        cut_to(&mut text, 0, true);
        let longest = text.replace("1000", &u64::MAX.to_string());
        assert!(
            json_len(&longest) <= NOTICE_RESERVE,
            "{}",
            json_len(&longest)
        );
    }

    #[test]
    fn small_fields_keep_everything_and_big_ones_share_the_rest() {
        assert_eq!(
            fair_shares(&[10, 1000, 5, 1000], 1015),
            vec![10, 500, 5, 500]
        );
        assert_eq!(fair_shares(&[10, 20], 100), vec![10, 20]);
        assert_eq!(fair_shares(&[300, 30, 3000], 330), vec![150, 30, 150]);
        assert_eq!(fair_shares(&[], 100), Vec::<usize>::new());
    }

    fn huge_error() -> RunResult {
        let huge = "\u{1b}[2J".repeat(1 << 20);
        RunResult {
            outcome: Outcome::Raised(PythonError {
                kind: "E".repeat(1_000_000),
                message: huge.clone(),
                traceback: format!("Traceback (most recent call last):\n{huge}\nE: end\n"),
            }),
            stdout: "out\n".into(),
            stderr: "\u{7}".repeat(1 << 20),
            stats: Stats::default(),
            images: Vec::new(),
            images_left_out: 0,
            files: Vec::new(),
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn a_bounded_result_fits_its_budget_as_sent() {
        for limit in [65536, 1 << 20, 1000, 1] {
            let mut result = huge_error();
            result.bound(limit);
            let sent = serde_json::to_string(&result).unwrap().len();
            // The JSON keys and stats, and one notice per field when the budget cannot hold them.
            let slack = 300 + 5 * NOTICE_RESERVE;
            assert!(
                sent <= RunResult::text_budget(limit) + slack,
                "{sent} bytes sent for a limit of {limit}"
            );
            assert_eq!(result.stdout, "out\n", "a small field is kept whole");
            let e = result.error().unwrap();
            if limit >= 65536 {
                assert!(e.traceback.starts_with("Traceback") && e.traceback.ends_with("E: end\n"));
                assert!(e.message.contains("bytes) cut here"), "{}", e.message);
                // With room for the notices, bounding again changes nothing.
                let mut again = result.clone();
                again.bound(limit);
                assert_eq!(again, result);
            }
        }
    }

    #[test]
    fn a_result_within_the_budget_is_untouched() {
        let mut result = RunResult {
            outcome: Outcome::Completed {
                result: Some("'\u{1b}'".into()),
            },
            stdout: "hello\n".into(),
            stderr: String::new(),
            stats: Stats::default(),
            images: Vec::new(),
            images_left_out: 0,
            files: Vec::new(),
            tool_calls: Vec::new(),
        };
        let before = result.clone();
        result.bound(100);
        assert_eq!(result, before);
        result.stdout = "\u{1b}".repeat(1000);
        result.bound(10);
        assert!(result.stdout.contains("1000 characters (1000 bytes) cut"));
    }
}
