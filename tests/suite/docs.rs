//! The docs hold together (no servers): every relative link of `README.md`,
//! `docs/` and `specs/` points at a file and, with a `#fragment`, at one of
//! its headings (GitHub's anchors); every page of `docs/` is linked from the
//! README; `docs/configuration.md` holds the settings table the code's
//! declaration makes (`config::settings_markdown`), meanings included; each alarm of
//! `template.yaml` has its section in `docs/runbook.md` and its
//! `AlarmDescription` points there; the README stays at most 250 lines; no
//! issue numbers in `src/` or `tests/`; `scripts/mutants-summary.py` keys mutants as it says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use archive_compaction::data::config::{SETTINGS, settings_markdown};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files whose links are checked: README.md, docs/*.md, specs/*.md.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    for dir in ["docs", "specs"] {
        let mut in_dir: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        in_dir.sort();
        v.extend(in_dir);
    }
    v
}

/// The lines of a markdown text outside fenced code blocks, with inline code
/// spans blanked out (a link inside backticks is not a link).
fn prose_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push(String::new());
            continue;
        }
        if fenced {
            out.push(String::new());
            continue;
        }
        let mut s = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                s.push(' ');
            } else {
                s.push(if in_code { ' ' } else { c });
            }
        }
        out.push(s);
    }
    out
}

/// Every `[text](target)` of a page, with its line number (1-based).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut v = Vec::new();
    for (i, line) in prose_lines(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(p) = rest.find("](") {
            let after = &rest[p + 2..];
            match after.find(')') {
                Some(end) => {
                    v.push((i + 1, after[..end].trim().to_string()));
                    rest = &after[end + 1..];
                }
                None => break,
            }
        }
    }
    v
}

/// GitHub's anchor for a heading: lower case, inline code and punctuation
/// dropped (letters, digits, `-`, `_` kept), spaces to `-`; a repeated anchor
/// gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_relative_link_resolves_to_a_file_and_heading() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        for (line, target) in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (path, frag) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file =
                if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            let here =
                format!("{}:{line}: ({target})", page.strip_prefix(root()).unwrap().display());
            if !file.exists() {
                broken.push(format!("{here}: no file {}", file.display()));
                continue;
            }
            if let Some(frag) = frag
                && (file.is_dir() || !anchors(&read(&file)).contains(frag))
            {
                broken.push(format!("{here}: no heading #{frag} there"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_docs_page_is_linked_from_the_readme() {
    let readme = read(&root().join("README.md"));
    let linked: BTreeSet<String> =
        links(&readme).into_iter().map(|(_, t)| t.split('#').next().unwrap().to_string()).collect();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            let rel = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
            if !linked.contains(&rel) {
                missing.push(rel);
            }
        }
    }
    assert!(missing.is_empty(), "docs pages the README does not link: {missing:?}");
}

#[test]
fn the_readme_stays_short() {
    let n = read(&root().join("README.md")).lines().count();
    assert!(n <= 250, "README.md has {n} lines; at most 250: move detail into docs/");
}

/// docs/configuration.md's settings table is the one the code's declaration
/// makes, name, default and meaning, row for row (`make docs-settings`
/// rewrites it); and a table row outside the generated block would be a
/// second, unchecked one.
#[test]
fn the_configuration_page_holds_the_generated_settings_table() {
    let text = read(&root().join("docs/configuration.md"));
    let begin = "<!-- settings: generated by `make docs-settings`";
    let end = "<!-- end of settings -->";
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        panic!("docs/configuration.md has no generated settings block ({begin} ... {end})")
    };
    let block = text[b..e].split_once('\n').unwrap().1;
    let generated = settings_markdown();
    for (shown, made) in block.lines().zip(generated.lines()) {
        assert_eq!(
            shown, made,
            "docs/configuration.md differs from the code: run `make docs-settings`"
        );
    }
    assert_eq!(
        block, generated,
        "docs/configuration.md differs from the code: run `make docs-settings`"
    );
    assert_eq!(generated.lines().count(), SETTINGS.len() + 2);
    for s in SETTINGS {
        let row = format!("| `{}` |", s.name);
        assert_eq!(text.matches(&row).count(), 1, "{} has a row of its own, once", s.name);
    }
}

/// (alarm logical id, its AlarmDescription) for every `AWS::CloudWatch::Alarm`
/// of template.yaml (read as text: a logical id line, then its Type line).
fn template_alarms() -> Vec<(String, String)> {
    let text = read(&root().join("template.yaml"));
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "Type: AWS::CloudWatch::Alarm" || i == 0 {
            continue;
        }
        let id = lines[i - 1].trim().trim_end_matches(':').to_string();
        let mut desc = String::new();
        let mut j = i + 1;
        while j < lines.len() && !lines[j].contains("AlarmDescription:") {
            j += 1;
        }
        if j < lines.len() {
            let indent = lines[j].len() - lines[j].trim_start().len();
            desc.push_str(lines[j].split_once("AlarmDescription:").unwrap().1);
            j += 1;
            while j < lines.len()
                && (lines[j].trim().is_empty()
                    || lines[j].len() - lines[j].trim_start().len() > indent)
            {
                desc.push(' ');
                desc.push_str(lines[j].trim());
                j += 1;
            }
        }
        out.push((id, desc));
    }
    out
}

#[test]
fn every_alarm_has_a_runbook_section_and_points_at_it() {
    let alarms = template_alarms();
    assert!(alarms.len() >= 4, "alarms read from template.yaml: {alarms:?}");
    let runbook = anchors(&read(&root().join("docs/runbook.md")));
    let mut wrong = Vec::new();
    for (id, desc) in &alarms {
        let anchor = id.to_lowercase();
        if !runbook.contains(&anchor) {
            wrong.push(format!("{id}: no section `## {id}` in docs/runbook.md"));
        }
        let link = format!("docs/runbook.md#{anchor}");
        if !desc.contains(&link) {
            wrong.push(format!("{id}: its AlarmDescription does not point at {link}: {desc:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let a = anchors(
        "# Deploy (AWS SAM)\n## `READ_CONCURRENCY`: the sweep\n## A b\n## A b\n```\n# not\n```\n",
    );
    let want: BTreeSet<String> = ["deploy-aws-sam", "read_concurrency-the-sweep", "a-b", "a-b-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(a, want);
    assert_eq!(
        links("see [x](a.md#b) and `[y](z.md)`\n```\n[q](r)\n```\n"),
        vec![(1, "a.md#b".to_string())]
    );
}

/// The marked blocks of `docs/performance.md` (`<!-- BEGIN bench/docs.py
/// NAME … -->` … `<!-- END bench/docs.py NAME -->`): name → the lines between.
fn bench_blocks(page: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = page;
    while let Some(i) = rest.find("<!-- BEGIN bench/docs.py ") {
        let after = &rest[i + "<!-- BEGIN bench/docs.py ".len()..];
        let name = after.split(':').next().unwrap().to_string();
        let body_at = after.find("-->").unwrap() + 3;
        let end = format!("<!-- END bench/docs.py {name} -->");
        let j = after.find(&end).unwrap_or_else(|| panic!("block {name} has no END line"));
        out.insert(name, after[body_at..j].trim().to_string());
        rest = &after[j + end.len()..];
    }
    out
}

/// `make bench`, `make bench-concurrency`, `make bench-audit`,
/// `make bench-audit-scale`, `make bench-backlog`, `make bench-parts`,
/// `make bench-sets`, `make bench-sizing`, `make bench-windows` and `make bench-instructions`
/// write the figures of
/// `docs/performance.md`: each of its
/// blocks holds what `bench/docs.py` wrote from a run (its first line says
/// when, at which commit, on which machine), not figures copied by hand; and
/// `bench/docs.py`, given a results file, rewrites exactly those blocks and
/// leaves every other line of the page as it was.
#[test]
fn performance_figures_are_written_by_the_benchmarks() {
    let page = read(&root().join("docs/performance.md"));
    let blocks = bench_blocks(&page);
    assert_eq!(
        blocks.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "audit",
            "audit-scale",
            "backlog",
            "instructions",
            "parts",
            "sets",
            "sizes",
            "sizing",
            "sweep",
            "windows"
        ],
        "the page's bench blocks"
    );
    for (name, body) in &blocks {
        assert!(
            body.starts_with("Measured ") && body.contains(" at commit `"),
            "block {name} of docs/performance.md was not written by bench/docs.py (run its make target): {body:.200}"
        );
    }
    // bench/docs.py on a results file that holds all three kinds.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("performance.md");
    std::fs::write(&copy, &page).unwrap();
    let results = dir.path().join("results.json");
    let job = serde_json::json!({"wall_s": 1.5, "cpu_ms_per_file": 0.15, "rss_mb": 40.0, "requests": 1020,
        "by_kind": {"GetObject": 1000, "ListObjectsV2": 3, "DeleteObjects": 1}, "output_bytes": 53000, "rows": 1000,
        "phases_s": {"list": 0.1, "read": 0.9, "prove": 0.01, "write": 0.05, "delete": 0.1}});
    let floor = serde_json::json!({"wall_s": 1.0, "cpu_ms_per_file": 0.1, "rss_mb": 30.0, "requests": 1000});
    let data = serde_json::json!({
        "meta": {"date": "2099-01-02", "commit": "abc1234", "machine": "9 CPUs (test)", "server": "ministack",
                 "latency_ms": 20, "concurrency": 64, "build": "release", "command": "make bench"},
        "results": {"1000": {"job": job, "floor": floor}},
        "sweep": {"64": {"job": job, "floor": floor}},
        "audit": [{"measure": "a day", "wall_s": 2.0, "cpu_s": 0.2, "peak_rss_mb": 40.0, "dates": 1,
                   "gets": 3, "bytes_read": 700, "multi_row_bytes": 1000}],
        "backlog": [{"invocation": 1, "status": "Success", "stop_reason": "deadline", "resume_date": "2026-01-09",
                     "days_compacted": 87, "files_compacted": 8700, "wall_s": 11.06, "cpu_s": 3.05, "peak_rss_mb": 36.7}],
        "backlog_check": {"flights": 8700, "rows": 8700, "distinct_flights": 8700, "compacted_files": 87,
                          "per_flight_files_left": 0, "rows_outside_their_date": 0},
    });
    std::fs::write(&results, data.to_string()).unwrap();
    let out = std::process::Command::new("python3")
        .arg(root().join("bench/docs.py"))
        .arg("--results")
        .arg(&results)
        .arg("--page")
        .arg(&copy)
        .output()
        .expect("python3 bench/docs.py");
    assert!(out.status.success(), "{out:?}");
    let written = read(&copy);
    let new_blocks = bench_blocks(&written);
    // Without --block, the parts, windows, audit-scale, sets and sizing
    // blocks (make bench-parts', bench-windows', bench-audit-scale's,
    // bench-sets', bench-sizing's) are left alone, and instructions (make
    // bench-instructions') without its figures.
    let by_block = ["parts", "windows", "audit-scale", "sets", "sizing", "instructions"];
    for name in by_block {
        assert_eq!(new_blocks[name], blocks[name], "{name}");
    }
    for (name, body) in new_blocks.iter().filter(|(n, _)| !by_block.contains(&n.as_str())) {
        assert!(
            body.starts_with("Measured 2099-01-02 at commit `abc1234` on 9 CPUs (test)"),
            "block {name}: {body:.300}"
        );
    }
    assert!(new_blocks["sizes"].contains("| 1,000 | job | 1.50 |"), "{}", new_blocks["sizes"]);
    assert!(new_blocks["sweep"].contains("| 64 | 1.00 |"), "{}", new_blocks["sweep"]);
    assert!(
        new_blocks["audit"].contains("| a day | 1 | 3 | 700 B of 1,000 B (70 %) |"),
        "{}",
        new_blocks["audit"]
    );
    assert!(
        new_blocks["backlog"]
            .contains("| 1 | Success | deadline | 2026-01-09 | 87 | 8,700 | 11.1 | 3.0 | 37 |")
            && new_blocks["backlog"].contains("8,700 rows for 8,700 flights, 8,700 distinct"),
        "{}",
        new_blocks["backlog"]
    );
    // `make bench-parts`: the same results as the parts block (the job
    // alone, its parts and address-space limit).
    let mut parts_job = job.clone();
    parts_job["parts"] = 2.into();
    parts_job["part_files"] = 500.into();
    parts_job["ulimit_v_kib"] = 524_288.into();
    let parts_data =
        serde_json::json!({"meta": data["meta"], "results": {"1000": {"job": parts_job}}});
    let parts_blocks = written_block(dir.path(), &page, "parts", &parts_data);
    assert!(
        parts_blocks["parts"]
            .contains("| 1,000 | 2 (500) | 1.5 | 0.150 | 40 | 524,288 KiB | 1,020 |"),
        "{}",
        parts_blocks["parts"]
    );
    assert_eq!(parts_blocks["sizes"], blocks["sizes"], "--block parts wrote only its block");
    // `make bench-windows`: the same table with the date's passes.
    let mut windows_job = parts_job.clone();
    windows_job["passes"] = 3.into();
    let windows_data =
        serde_json::json!({"meta": data["meta"], "results": {"1000": {"job": windows_job}}});
    let windows_blocks = written_block(dir.path(), &page, "windows", &windows_data);
    assert!(
        windows_blocks["windows"]
            .contains("| 1,000 | 2 (500) | 3 | 1.5 | 0.150 | 40 | 524,288 KiB | 1,020 |"),
        "{}",
        windows_blocks["windows"]
    );
    assert_eq!(windows_blocks["parts"], blocks["parts"], "--block windows wrote only its block");
    // `make bench-audit-scale`: an audit under a deadline and a limit.
    let scale = serde_json::json!({"meta": data["meta"], "audit": [{"measure": "a big day", "wall_s": 2.0,
        "cpu_s": 0.2, "peak_rss_mb": 40.0, "dates": 1, "gets": 3, "bytes_read": 700, "status": "clean", "resume_date": null,
        "ulimit_v_kib": 524_288}]});
    let scale_blocks = written_block(dir.path(), &page, "audit-scale", &scale);
    assert!(
        scale_blocks["audit-scale"]
            .contains("| a big day | clean |  | 3 | 700 B | 2.00 | 0.20 | 40 | 524,288 KiB |"),
        "{}",
        scale_blocks["audit-scale"]
    );
    assert_eq!(scale_blocks["audit"], blocks["audit"], "--block audit-scale wrote only its block");
    // `make bench-sets`: a date's uuid sets by size, one died.
    let sets = serde_json::json!({"meta": data["meta"], "sets": [
        {"flights": 1_000_000, "limit": null, "outcome": "ok", "peak_rss_kib": 49_152, "disk_bytes": 16_000_000,
         "wall_s": 1.9, "cpu_s": 1.2, "ulimit_v_kib": 524_288},
        {"flights": 10_000_000, "limit": 10_000_000, "outcome": "died (exit -6): memory allocation failed",
         "wall_s": 5.3, "cpu_s": 1.0, "ulimit_v_kib": 524_288}]});
    let sets_blocks = written_block(dir.path(), &page, "sets", &sets);
    assert!(
        sets_blocks["sets"]
            .contains("| 1,000,000 | 524,288 (default) | ok | 48 | 16 | 1.9 | 1.2 | 524,288 KiB |")
            && sets_blocks["sets"].contains(
                "| 10,000,000 | 10,000,000 | died (exit -6): memory allocation failed | ? | ? |"
            ),
        "{}",
        sets_blocks["sets"]
    );
    assert_eq!(sets_blocks["parts"], blocks["parts"], "--block sets wrote only its block");
    // `make bench-sizing`: a run a row, the day's verdict on its last.
    let sizing = serde_json::json!({"meta": data["meta"], "sizing": [
        {"files": 30_000, "memory_mb": 128, "ulimit_v_kib": 0, "max_duration_s": null, "margin_s": null,
         "exact": true, "read_back": {"rows": 30_000, "distinct_flights": 30_000, "per_flight_files_left": 0},
         "runs": [{"run": 1, "status": "Success", "stop_reason": "deadline", "parts": 3, "passes": 1,
                   "files_left": 12_000, "files_read": 18_000, "wall_s": 29.5, "cpu_ms_per_file": 0.25, "rss_mb": 90.4},
                  {"run": 2, "status": "Success", "stop_reason": "reached_cutoff", "parts": 2, "passes": 1,
                   "files_left": 0, "files_read": 12_000, "wall_s": 20.0, "cpu_ms_per_file": 0.25, "rss_mb": null}]}]});
    let sizing_blocks = written_block(dir.path(), &page, "sizing", &sizing);
    let commit = data["meta"]["commit"].as_str().unwrap_or("?");
    assert!(
        sizing_blocks["sizing"].contains(&format!(
            "| 30,000 | 128 | none |  | `{commit}` | 1 | Success | deadline | 3 | 1 | 12,000 | 18,000 | 29.5 | 0.250 | 90 |  |"
        )) && sizing_blocks["sizing"].contains(
            "| 2 | Success | reached_cutoff | 2 | 1 | 0 | 12,000 | 20.0 | 0.250 | ? | exact: 30,000 rows, 30,000 flights, 0 left |"
        ),
        "{}",
        sizing_blocks["sizing"]
    );
    assert_eq!(sizing_blocks["sets"], blocks["sets"], "--block sizing wrote only its block");
    // `make bench-instructions`: both programs a file and their ratio, the job's split.
    let program = |g: u64| serde_json::json!({"instructions": g, "requests": 10_010});
    let mut job = program(9_050_000_000);
    job["split"] = serde_json::json!({"decode": 2_193_000_000u64, "footer": null});
    let ins = serde_json::json!({"meta": data["meta"], "instructions":
        {"files": 10_000, "job": job, "sdk_floor": program(5_738_000_000)}});
    let ins_blocks = written_block(dir.path(), &page, "instructions", &ins);
    let text = &ins_blocks["instructions"];
    assert!(
        text.contains("| job (`run`) | 9.050 G | 905.0 k | 1.577× | 10,010 |")
            && text.contains("| sdk-floor | 5.738 G | 573.8 k | 1.000× |")
            && text.contains("| decode | 219.3 k | 24.2 % |")
            && text.contains("| footer | not found | |"),
        "{text}"
    );
    assert_eq!(ins_blocks["sizes"], blocks["sizes"], "--block instructions wrote only its block");
    // Outside the blocks, nothing changed.
    let outside = |text: &str| {
        let mut t = text.to_string();
        for (name, body) in bench_blocks(text) {
            t = t.replacen(&body, &format!("[{name}]"), 1);
        }
        t
    };
    assert_eq!(
        outside(&written),
        outside(&page),
        "bench/docs.py changed the page outside its blocks"
    );
}

/// The bench blocks of `page` after `bench/docs.py --block block` wrote
/// `data` (a results file's JSON) into a copy of it in `dir`.
fn written_block(
    dir: &Path,
    page: &str,
    block: &str,
    data: &serde_json::Value,
) -> BTreeMap<String, String> {
    let (results, copy) = (dir.join(format!("{block}.json")), dir.join(format!("{block}.md")));
    std::fs::write(&results, data.to_string()).unwrap();
    std::fs::write(&copy, page).unwrap();
    let out = std::process::Command::new("python3")
        .arg(root().join("bench/docs.py"))
        .args(["--block", block, "--results"])
        .arg(&results)
        .arg("--page")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| panic!("python3 bench/docs.py --block {block}: {e}"));
    assert!(out.status.success(), "{block}: {out:?}");
    bench_blocks(&read(&copy))
}

/// The files under `dir` (recursively) whose name ends with one of `exts`.
fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, exts, out);
        } else if path.extension().is_some_and(|x| exts.iter().any(|e| x == *e)) {
            out.push(path);
        }
    }
}

/// Code and tests say what they guarantee, not which issue asked for it: the
/// issues are not in the repository, so an issue's number tells its reader nothing.
/// No `issue N`, `issue #N`, `issue_N` or `issue-N` in `src/` or `tests/`.
#[test]
fn no_issue_numbers_in_code_or_tests() {
    let mut files = Vec::new();
    for dir in ["src", "tests"] {
        files_under(&root().join(dir), &["rs", "py"], &mut files);
    }
    let mut found = Vec::new();
    for path in files {
        let text = read(&path);
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let mut rest = lower.as_str();
            while let Some(at) = rest.find("issue") {
                let after = rest[at + 5..].trim_start_matches([' ', '#', '_', '-']);
                if after.starts_with(|c: char| c.is_ascii_digit()) {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    break;
                }
                rest = &rest[at + 5..];
            }
        }
    }
    assert!(found.is_empty(), "issue numbers in code or tests:\n{}", found.join("\n"));
}

/// template.yaml's function environment, each variable with the value the
/// stack passes by default: a literal, or its `!Ref` parameter's `Default`
/// (read as text: `Parameters:` entries, then `Variables:` lines).
fn template_environment() -> BTreeMap<String, String> {
    let text = read(&root().join("template.yaml"));
    let mut defaults = BTreeMap::new();
    let mut param: Option<String> = None;
    let mut in_params = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_params = line == "Parameters:";
            param = None;
            continue;
        }
        if !in_params {
            continue;
        }
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with(' ')
        {
            param = Some(name.to_string());
        } else if let (Some(p), Some(d)) = (&param, line.trim().strip_prefix("Default: ")) {
            defaults.insert(p.clone(), d.trim_matches('"').to_string());
        }
    }
    let start = text.find("        Variables:\n").expect("the function's Variables");
    let mut env = BTreeMap::new();
    for line in text[start..].lines().skip(1) {
        let Some((name, value)) = line.trim().split_once(": ") else {
            break;
        };
        if !line.starts_with("          ") {
            break;
        }
        // A parameter without a Default (the bucket) is required: no
        // default to compare.
        let value = match value.strip_prefix("!Ref ") {
            Some(p) => defaults.get(p).cloned(),
            None => Some(value.trim_matches('"').to_string()),
        };
        if let Some(value) = value {
            env.insert(name.to_string(), value);
        }
    }
    env
}

/// The stack's defaults are the code's: every variable template.yaml sets,
/// at its parameter's default, gives the settings the code gives without
/// it (an empty parameter is the setting unset). A template that restates
/// a default the code has since changed fails here.
#[test]
fn the_templates_defaults_are_the_codes() {
    use archive_compaction::data::config::Config;
    let env = template_environment();
    assert!(env.len() >= 10, "variables read from template.yaml: {env:?}");
    let base: std::collections::HashMap<String, String> =
        [("S3_BUCKET".to_string(), "archive".to_string())].into();
    let code = Config::from_map(&base).unwrap();
    let mut wrong = Vec::new();
    for (name, value) in &env {
        assert!(
            SETTINGS.iter().any(|s| s.name == name),
            "{name}: set by template.yaml but not a setting of the code"
        );
        let mut with = base.clone();
        with.insert(name.clone(), value.clone());
        match Config::from_map(&with) {
            Ok(c) if c == code => {}
            Ok(c) => wrong.push(format!(
                "{name}={value:?} (template.yaml's default) gives {c:?}, the code's default {code:?}"
            )),
            Err(e) => wrong.push(format!("{name}={value:?}: {e}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The layers of `src/`, one folder each, top to bottom (STYLE.md 17): the
/// shells over the commands, over the protocol, over data, over
/// infrastructure. A module imports from its own layer or a lower one.
const LAYERS: [&str; 5] = ["app", "commands", "protocol", "data", "infra"];

/// The imports that still go up a layer, each with what would end it. Any
/// other fails the test, and so does one of these once it is gone.
const UPWARD: &[(&str, &str, &str)] = &[(
    "data::input",
    "protocol::proof",
    "`proof::RowFlights` (the flights of a batch's rows) moved down into data",
)];

/// The module a file of `src/` is, as a path names it: `src/protocol/commit.rs`
/// is `protocol::commit`, `src/data/merge/stream.rs` is `data::merge::stream`,
/// `src/data/mod.rs` is `data`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        (rel.components()).map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// What the import check counts in: a layer's own file (`app`) or one module
/// of a layer with its submodules (`data::merge`, `commands::run`).
fn unit_of(path: &[String]) -> String {
    path[..path.len().min(2)].join("::")
}

/// The names of a path after its `crate::` or `super::`: `a::b::C` of `a::b::C;`.
fn segments(mut rest: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let name: String =
            (rest.chars()).take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            return out;
        }
        rest = &rest[name.len()..];
        out.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return out,
        }
    }
}

/// Every `.rs` file of `src/` but `main.rs` and `lib.rs`, with its module path.
fn module_files() -> Vec<(PathBuf, Vec<String>)> {
    let src = root().join("src");
    let mut files = Vec::new();
    files_under(&src, &["rs"], &mut files);
    files.sort();
    (files.into_iter())
        .map(|f| {
            let path = module_path(f.strip_prefix(&src).unwrap());
            (f, path)
        })
        .filter(|(_, p)| p.len() > 1 || (p[0] != "main" && p[0] != "lib"))
        .collect()
}

/// A file's code before its first `#[cfg(test)] mod`, without its comment lines.
fn code_of(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let test_mod = |n: &&str| {
        let n = n.trim();
        let n = n.strip_prefix("pub(").and_then(|r| r.split_once(") ")).map_or(n, |(_, r)| r);
        n.starts_with("mod ")
    };
    (lines.iter().enumerate())
        .take_while(|(i, l)| {
            !(l.trim() == "#[cfg(test)]" && lines.get(i + 1).is_some_and(test_mod))
        })
        .map(|(_, l)| *l)
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

/// The paths `code`, of module `path`, names by `crate::` or `super::`, each from the crate root:
/// `super::widen::convert` in `data::merge::schema` is `data::merge::widen::convert`; a group
/// (`super::{a, b::C}`, over lines too) is a path a member; a glob ends in `*`.
fn named_paths(path: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut starts: Vec<(usize, Vec<String>, usize)> =
        (code.match_indices("crate::")).map(|(at, _)| (at, Vec::new(), at + 7)).collect();
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("::") {
            continue; // the second `super` of `super::super::`
        }
        let (mut base, mut end) = (path.to_vec(), at);
        while code[end..].starts_with("super::") {
            base.pop();
            end += 7;
        }
        starts.push((at, base, end));
    }
    for (_, mut head, end) in starts {
        // The names, then what follows the last `::`: a glob, a group or nothing.
        let mut rest = &code[end..];
        loop {
            let name: String =
                (rest.chars()).take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            rest = &rest[name.len()..];
            let more = !name.is_empty() && rest.starts_with("::");
            if !name.is_empty() {
                head.push(name);
            }
            if !more {
                break;
            }
            rest = &rest[2..];
        }
        if rest.starts_with('*') {
            out.push([head.clone(), vec!["*".to_string()]].concat());
        } else if let Some(group) = rest.strip_prefix('{').and_then(|g| g.split('}').next()) {
            for member in group.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                let tail = if member == "*" { vec![member.to_string()] } else { segments(member) };
                out.push([head.clone(), tail].concat());
            }
        } else {
            out.push(head);
        }
    }
    out
}

/// Each module of `src/` ([`unit_of`]), with the modules its code ([`code_of`]) names by a
/// `crate::` or `super::` path; and each module file (`data::merge::schema`), with the module
/// files it names, an item its parent has from a submodule (`use schema::{conform}`) counting for
/// that submodule, by a path or, through a `super::*` glob, by its name in the code.
fn module_imports() -> (BTreeMap<String, BTreeSet<String>>, BTreeMap<String, BTreeSet<String>>) {
    let files = module_files();
    let units: BTreeSet<String> = files.iter().map(|(_, p)| unit_of(p)).collect();
    let modules: BTreeSet<String> = files.iter().map(|(_, p)| p.join("::")).collect();
    // The unit a path from the crate root names: `data::merge` of
    // `data::merge::Limit`, `app` of `app::Deps`; none for a macro.
    let unit_named = |path: &[String]| -> Option<String> {
        ([2, 1].into_iter())
            .filter(|n| *n <= path.len())
            .map(|n| path[..n].join("::"))
            .find(|u| units.contains(u))
    };
    let texts: Vec<String> = files.iter().map(|(f, _)| read(f)).collect();
    let codes: Vec<String> = texts.iter().map(|t| code_of(t).join("\n")).collect();
    // Each module's items taken from a submodule by a `use`: name -> the submodule.
    let mut from_child: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for ((_, path), code) in files.iter().zip(&codes) {
        let module = path.join("::");
        for statement in code.split(';').map(str::trim) {
            let s = statement.strip_prefix("pub(").and_then(|r| r.split_once(") "));
            let s = s.map_or(statement.strip_prefix("pub ").unwrap_or(statement), |(_, r)| r);
            let Some(rest) = s.strip_prefix("use ") else { continue };
            let child = segments(rest).into_iter().next().unwrap_or_default();
            let child = format!("{module}::{child}");
            if !modules.contains(&child) {
                continue;
            }
            let items = rest.split_once("::").map_or("", |(_, r)| r);
            for item in items.split([',', '{', '}']).map(str::trim).filter(|i| !i.is_empty()) {
                let name = item.rsplit(' ').next().unwrap_or(item).to_string();
                from_child.entry(module.clone()).or_default().insert(name, child.clone());
            }
        }
    }
    let (mut out, mut by_file) = (BTreeMap::new(), BTreeMap::new());
    for (((f, path), text), code) in files.iter().zip(&texts).zip(&codes) {
        let rel = f.strip_prefix(root()).unwrap().display().to_string();
        assert!(
            LAYERS.contains(&path[0].as_str()),
            "{rel}: in no layer; src/ holds lib.rs, main.rs and the layers' folders {LAYERS:?}"
        );
        for line in code_of(text) {
            assert!(
                !line.contains("crate::{"),
                "{rel}: one `crate::` path an import, so this check sees each: {line}"
            );
        }
        let (unit, module) = (unit_of(path), path.join("::"));
        let names: &mut BTreeSet<String> = out.entry(unit.clone()).or_default();
        let files_named: &mut BTreeSet<String> = by_file.entry(module.clone()).or_default();
        let words: BTreeSet<&str> =
            code.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').collect();
        for named in named_paths(path, code) {
            if let Some(u) = unit_named(&named).filter(|u| *u != unit) {
                names.insert(u);
            }
            let Some(n) =
                (1..=named.len()).rev().find(|n| modules.contains(&named[..*n].join("::")))
            else {
                continue;
            };
            let (m, next) = (named[..n].join("::"), named.get(n).map(String::as_str));
            let children = from_child.get(&m);
            match next {
                Some("*") => files_named.extend(
                    (children.into_iter().flatten())
                        .filter(|(name, _)| words.contains(name.as_str()))
                        .map(|(_, c)| c.clone()),
                ),
                Some(name) if children.is_some_and(|c| c.contains_key(name)) => {
                    files_named.insert(children.unwrap()[name].clone());
                    continue;
                }
                _ => {}
            }
            files_named.insert(m);
        }
        files_named.remove(&module);
    }
    (out, by_file)
}

/// Imports run one way: down the layers ([`LAYERS`]; a higher layer's module
/// named by a lower one is an error unless listed in [`UPWARD`]), and with no
/// circle among modules (a module that needs another's type takes it from
/// the lower one, as `partition` takes `Flights` from `plan`). Every module
/// has its row in docs/ARCHITECTURE.md's "Code layout" table, under its
/// layer's row (`**layer**`), and every row names a module.
#[test]
fn modules_import_in_one_direction_and_each_has_its_row() {
    let (imports, by_file) = module_imports();
    assert!(imports["protocol::partition"].contains("protocol::plan"));
    assert!(by_file["data::merge::held"].contains("data::merge::widen"), "{by_file:?}");

    let rank = |m: &str| {
        let layer = m.split("::").next().unwrap();
        LAYERS.iter().position(|l| *l == layer).unwrap()
    };
    let upward: Vec<(&str, &str)> = (imports.iter())
        .flat_map(|(m, names)| names.iter().map(move |n| (m.as_str(), n.as_str())))
        .filter(|(m, n)| rank(n) < rank(m))
        .collect();
    let wrong: Vec<String> = (upward.iter())
        .filter(|(m, n)| !UPWARD.iter().any(|(a, b, _)| a == m && b == n))
        .map(|(m, n)| format!("{m} imports {n}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "imports of a higher layer (top to bottom: {LAYERS:?}): {wrong:?}; \
         take what is needed from a lower layer, or move it down"
    );
    for (a, b, fix) in UPWARD {
        assert!(
            upward.contains(&(*a, *b)),
            "{a} no longer imports {b} ({fix}): take it off UPWARD"
        );
    }

    // Depth-first: a module met again while still on the path is a circle.
    fn visit<'a>(
        m: &'a str,
        imports: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(at) = path.iter().position(|p| *p == m) {
            panic!("import circle: {} -> {m}", path[at..].join(" -> "));
        }
        if done.contains(m) {
            return;
        }
        path.push(m);
        for next in imports.get(m).into_iter().flatten() {
            if imports.contains_key(next) {
                visit(next, imports, path, done);
            }
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in imports.keys() {
        visit(m, &imports, &mut Vec::new(), &mut done);
    }
    // And among module files, `super::` paths included (a parent declares its submodules).
    let mut done = BTreeSet::new();
    for m in by_file.keys() {
        visit(m, &by_file, &mut Vec::new(), &mut done);
    }

    let arch = read(&root().join("docs/ARCHITECTURE.md"));
    let table = arch.split("## Code layout").nth(1).unwrap();
    let mut layers = Vec::new();
    let mut rows: BTreeMap<String, String> = BTreeMap::new();
    let body = (table.lines())
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2);
    for line in body {
        let cell = line.split('|').nth(1).unwrap().trim();
        if let Some(layer) = cell.strip_prefix("**").and_then(|c| c.strip_suffix("**")) {
            layers.push(layer.trim_matches('`').to_string());
            continue;
        }
        for name in cell.split(',').map(|n| n.trim().trim_matches('`')) {
            let under = layers.last().cloned().unwrap_or_default();
            rows.insert(name.to_string(), under);
        }
    }
    assert_eq!(
        layers, LAYERS,
        "docs/ARCHITECTURE.md's Code layout: one `**layer**` row a layer, top to bottom"
    );
    let mut wrong = Vec::new();
    for unit in imports.keys() {
        let layer = unit.split("::").next().unwrap();
        match rows.get(unit) {
            _ if unit == layer => {}
            None => wrong.push(format!("no row for {unit}")),
            Some(under) if under != layer => wrong.push(format!("{unit}'s row is under {under}")),
            Some(_) => {}
        }
    }
    let modules: BTreeSet<String> = (module_files().iter())
        .flat_map(|(_, p)| (1..=p.len()).map(|n| p[..n].join("::")).collect::<Vec<_>>())
        .collect();
    for name in rows.keys().filter(|r| !modules.contains(*r)) {
        wrong.push(format!("a row for {name}, which is no module"));
    }
    assert!(wrong.is_empty(), "docs/ARCHITECTURE.md's Code layout: {}", wrong.join("; "));
}

/// `scripts/mutants-summary.py` keys a mutant by file, description and ordinal
/// (from `cargo mutants --list`, here a stand-in `cargo` on the PATH): two
/// same-described mutants on different lines are two rows, a newer result
/// replaces its row, a row whose mutant is no longer listed is dropped, lines
/// are refreshed from the list, and listed mutants without a row are counted.
#[test]
fn mutants_summary_keys_by_file_description_and_ordinal() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let list = "src/a.rs:12:5: replace > with >= in f\n\
                src/a.rs:30:9: replace > with >= in f\n\
                src/a.rs:40:1: replace h -> bool with true\n\
                src/a.rs:45:2: replace + with - in h\n\
                src/b.rs:7:3: replace k -> u64 with 0\n";
    std::fs::write(d.join("list.txt"), list).unwrap();
    let cargo = d.join("bin/cargo");
    std::fs::create_dir(d.join("bin")).unwrap();
    // `cargo mutants --list --file F…`: the listed mutants of the files named.
    let script = "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --file ] && grep \"^$2:\" list.txt; shift; done\n";
    std::fs::write(&cargo, script).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Old rows: the second `>` mutant caught at line 28 (it moved to 30), a
    // mutant that is gone, and `h` missed (the new run catches it).
    std::fs::write(
        d.join("mutants.tsv"),
        "outcome\tfile\tline\tcommit\tmutant\tn\n\
         caught\tsrc/a.rs\t28\told\treplace > with >= in f\t1\n\
         missed\tsrc/a.rs\t50\told\treplace gone -> u8 with 1\t0\n\
         missed\tsrc/a.rs\t40\told\treplace h -> bool with true\t0\n",
    )
    .unwrap();
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(d.join("out/caught.txt"), "src/a.rs:40:1: replace h -> bool with true\n")
        .unwrap();
    std::fs::write(d.join("out/missed.txt"), "src/a.rs:12:5: replace > with >= in f\n").unwrap();
    std::fs::write(
        d.join("testing.md"),
        "before\n<!-- BEGIN mutants-summary -->\nold\n<!-- END mutants-summary -->\nafter\n",
    )
    .unwrap();
    let path = format!("{}:{}", d.join("bin").display(), std::env::var("PATH").unwrap());
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/mutants-summary.py"))
        .args(["--out", "out", "--summary", "mutants.tsv", "--doc", "testing.md"])
        .current_dir(d)
        .env("PATH", path)
        .output()
        .expect("python3 scripts/mutants-summary.py");
    assert!(out.status.success(), "{out:?}");
    let rows: Vec<Vec<String>> = read(&d.join("mutants.tsv"))
        .lines()
        .skip(1)
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    let brief: Vec<(&str, &str, &str, &str)> =
        rows.iter().map(|r| (r[0].as_str(), r[2].as_str(), r[4].as_str(), r[5].as_str())).collect();
    assert_eq!(
        brief,
        [
            ("missed", "12", "replace > with >= in f", "0"),
            ("caught", "30", "replace > with >= in f", "1"),
            ("caught", "40", "replace h -> bool with true", "0"),
        ]
    );
    assert_eq!(rows[1][3], "old", "a row not re-run keeps its commit");
    assert_ne!(rows[2][3], "old", "a re-run row takes the tree's commit");
    let doc = read(&d.join("testing.md"));
    assert!(
        doc.starts_with("before\n<!-- BEGIN mutants-summary -->")
            && doc.ends_with("<!-- END mutants-summary -->\nafter\n")
    );
    assert!(doc.contains("| `src/a.rs` | 2 | 1 | 0 | 0 | 67 % |"), "{doc}");
    assert!(doc.contains("- `src/a.rs:12`: replace > with >= in f"), "{doc}");
    assert!(
        doc.contains("not measured: 1."),
        "`+` in h has no row (src/b.rs is not summed): {doc}"
    );
}
