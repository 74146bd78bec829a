//! Python semantics inside the sandbox: result values, errors, imports, files, Unicode.

use crate::common;

use common::{run, run_allowing, value};
use safe_python_executor::{ImportPolicy, Outcome, RunOptions, Session};

/// The result of code that must complete, run in `session`.
#[track_caller]
fn in_session(session: &mut Session, code: &str) -> Option<String> {
    let run = common::runtime()
        .block_on(session.run(code, &RunOptions::default()))
        .expect("no host fault");
    assert!(!run.result.is_failure(), "{code:?}: {run:#?}");
    run.result.result().map(str::to_owned)
}

#[test]
fn the_last_expression_is_the_result() {
    assert_eq!(value("1 + 1").as_deref(), Some("2"));
    assert_eq!(value("x = [1, 2]\nx + [3]").as_deref(), Some("[1, 2, 3]"));
    assert_eq!(value("'a' * 3").as_deref(), Some("'aaa'"));
    assert_eq!(
        value("2**100").as_deref(),
        Some("1267650600228229401496703205376")
    );
}

#[test]
fn a_final_assignment_gives_the_assigned_value() {
    assert_eq!(value("result = 2 + 3").as_deref(), Some("5"));
    assert_eq!(value("a, b = 1, 'x'").as_deref(), Some("(1, 'x')"));
    assert_eq!(value("x = 1\nx += 41").as_deref(), Some("42"));
    assert_eq!(value("y: int = 7").as_deref(), Some("7"));
    assert_eq!(value("a = b = 9").as_deref(), Some("9"));
}

#[test]
fn statements_and_none_give_no_result() {
    assert_eq!(value("print('hi')"), None);
    assert_eq!(value("None"), None);
    assert_eq!(value("def f():\n    return 1"), None);
    assert_eq!(value(""), None);
    assert_eq!(value("for i in range(3):\n    pass"), None);
    // A slice cannot be held in a hidden temporary, so its assignment gives nothing.
    assert_eq!(value("a = [1, 2, 3]\na[1:] += [4]"), None);
}

#[test]
fn a_final_assignment_to_an_attribute_or_subscript_gives_the_stored_value() {
    let counter = "class A:\n    count = 0\na = A()\n";
    for (code, expected) in [
        ("a.count += 1", "1"),
        ("a.count = 5", "5"),
        ("a.count: int = 7", "7"),
        ("a.count -= 3", "-3"),
        ("a.x = a.y = 4", "4"),
    ] {
        assert_eq!(
            value(&format!("{counter}{code}")).as_deref(),
            Some(expected),
            "{code}"
        );
    }
    assert_eq!(value("d = {}\nd['k'] = 5").as_deref(), Some("5"));
    assert_eq!(value("d = {'k': 1}\nd['k'] += 2").as_deref(), Some("3"));
    assert_eq!(value("d = {}\nd['k']: int = 9").as_deref(), Some("9"));
    assert_eq!(value("m = [[0, 0]]\nm[0][1] += 6").as_deref(), Some("6"));
    assert_eq!(value("d = {}\nd[1, 2] = 'pair'").as_deref(), Some("'pair'"));
    // In-place operators act on the stored object, as in CPython.
    assert_eq!(
        value("d = {'l': [1]}\nd['l'] += [2]").as_deref(),
        Some("[1, 2]")
    );
    // The hidden temporaries are gone afterwards.
    assert_eq!(
        value("d = {}\nd['k'] = 1\n[k for k in globals() if k.startswith('<')]").as_deref(),
        Some("[]")
    );
}

#[test]
fn a_final_augmented_assignment_evaluates_each_part_once_in_order() {
    let code = "log = []\n\
        class C:\n    \
            def __getitem__(self, k):\n        log.append(('get', k))\n        return 10\n    \
            def __setitem__(self, k, v):\n        log.append(('set', k, v))\n\
        def base():\n    log.append('base')\n    return c\n\
        def idx():\n    log.append('idx')\n    return 'k'\n\
        def val():\n    log.append('val')\n    return 5\n\
        c = C()\n\
        base()[idx()] += val()";
    let mut session = common::runtime()
        .block_on(Session::new(common::sandbox()))
        .expect("a session");
    assert_eq!(in_session(&mut session, code).as_deref(), Some("15"));
    assert_eq!(
        in_session(&mut session, "log").as_deref(),
        Some("['base', 'idx', ('get', 'k'), 'val', ('set', 'k', 15)]")
    );
    let code = "log = []\n\
        class P:\n    \
            def __getattr__(self, name):\n        log.append(('get', name))\n        return 1\n    \
            def __setattr__(self, name, v):\n        log.append(('set', name, v))\n\
        def target():\n    log.append('target')\n    return p\n\
        def val():\n    log.append('val')\n    return 2\n\
        p = P()\n\
        target().n += val()";
    assert_eq!(in_session(&mut session, code).as_deref(), Some("3"));
    assert_eq!(
        in_session(&mut session, "log").as_deref(),
        Some("['target', ('get', 'n'), 'val', ('set', 'n', 3)]")
    );
    let code = "log = []\nclass Q:\n    def __setattr__(self, name, v):\n        log.append(name)\n\
        def val():\n    log.append('val')\n    return 8\nq = Q()\nq.z = val()";
    assert_eq!(in_session(&mut session, code).as_deref(), Some("8"));
    assert_eq!(
        in_session(&mut session, "log").as_deref(),
        Some("['val', 'z']")
    );
}

#[test]
fn an_error_in_a_final_assignment_points_at_its_line() {
    let r = run("x = 1\nd = {}\nd['k'] += 1");
    let e = r.error().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(e.kind, "KeyError");
    assert!(e.traceback.contains("line 3"), "{}", e.traceback);
    assert!(e.traceback.contains("d['k'] += 1"), "{}", e.traceback);
}

#[test]
fn output_is_captured_in_order() {
    let r = run_allowing(
        "import sys\nprint('a')\nsys.stderr.write('b\\n')\nprint('c', end='')",
        &["sys"],
    );
    assert_eq!(r.stdout, "a\nc");
    assert_eq!(r.stderr, "b\n");
}

#[test]
fn output_before_an_exception_is_kept() {
    let r = run("print('before')\n1/0");
    assert_eq!(r.stdout, "before\n");
    let Outcome::Raised(e) = &r.outcome else {
        panic!("{r:?}")
    };
    assert_eq!(e.kind, "ZeroDivisionError");
    assert_eq!(e.message, "division by zero");
    assert!(e.traceback.contains("line 2"), "{}", e.traceback);
    assert!(
        e.traceback.contains("1/0"),
        "the source line is shown: {}",
        e.traceback
    );
    assert!(
        !e.traceback.contains("<sandbox>"),
        "driver frames are hidden: {}",
        e.traceback
    );
}

#[test]
fn syntax_errors_are_reported_as_exceptions() {
    let r = run("def f(:\n  pass");
    let Outcome::Raised(e) = &r.outcome else {
        panic!("{r:?}")
    };
    assert_eq!(e.kind, "SyntaxError");
}

#[test]
fn system_exit_and_keyboard_interrupt_end_the_run_with_a_report() {
    for (code, kind) in [
        ("raise SystemExit", "SystemExit"),
        ("print('x')\nraise SystemExit(3)", "SystemExit"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("class E(BaseException): pass\nraise E('custom')", "E"),
    ] {
        let r = run(code);
        match &r.outcome {
            Outcome::Raised(e) => assert_eq!(e.kind, kind, "{code}"),
            other => panic!("{code}: {other:?}"),
        }
    }
    assert_eq!(
        run_allowing("import sys\nsys.exit(3)", &["sys"])
            .error()
            .unwrap()
            .message,
        "3"
    );
}

#[test]
fn exceptions_with_a_broken_str_are_still_reported() {
    let r = run("class E(Exception):\n    def __str__(self):\n        raise ValueError\nraise E()");
    assert_eq!(r.error().unwrap().kind, "E");
}

#[test]
fn a_raising_repr_is_an_error_not_a_crash() {
    let r = run("class R:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nR()");
    assert_eq!(r.error().unwrap().kind, "RuntimeError");
}

#[test]
fn default_recursion_limit_gives_a_collapsed_recursion_error() {
    let r = run("def f(n):\n    return f(n + 1)\nf(0)");
    let e = r.error().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(e.kind, "RecursionError");
    assert!(
        e.traceback.contains("[Previous line repeated"),
        "{}",
        e.traceback
    );
    assert!(
        e.traceback.len() < 4000,
        "traceback of {} bytes",
        e.traceback.len()
    );
}

#[test]
fn every_default_module_imports_and_works() {
    let cases = [
        (
            "collections",
            "import collections\ncollections.Counter('abca')['a']",
            "2",
        ),
        (
            "datetime",
            "import datetime\ndatetime.date(2024, 1, 31) + datetime.timedelta(days=1)",
            "datetime.date(2024, 2, 1)",
        ),
        (
            "itertools",
            "import itertools\nlist(itertools.permutations([1, 2]))",
            "[(1, 2), (2, 1)]",
        ),
        ("math", "import math\nmath.factorial(10)", "3628800"),
        (
            "queue",
            "import queue\nq = queue.Queue()\nq.put(4)\nq.get()",
            "4",
        ),
        (
            "random",
            "import random\nrandom.seed(7)\nr = random.Random(1)\n0 <= random.random() < 1 and len(str(r.random())) > 3",
            "True",
        ),
        (
            "re",
            "import re\nre.findall(r'\\d+', 'a1b22c333')",
            "['1', '22', '333']",
        ),
        ("stat", "import stat\nstat.S_ISDIR(stat.S_IFDIR)", "True"),
        (
            "statistics",
            "import statistics\nstatistics.median([3, 1, 2])",
            "2",
        ),
        ("time", "import time\ntime.time() > 1.7e9", "True"),
        (
            "unicodedata",
            "import unicodedata\nunicodedata.name('é')",
            "'LATIN SMALL LETTER E WITH ACUTE'",
        ),
    ];
    for (module, code, expected) in cases {
        assert_eq!(value(code).as_deref(), Some(expected), "module {module}");
    }
    assert_eq!(
        value("from collections import abc\nimport collections.abc\nabc is collections.abc")
            .as_deref(),
        Some("True")
    );
}

#[test]
fn refused_imports_name_the_module_and_the_allowlist() {
    for code in [
        "import os",
        "import subprocess",
        "from os import path",
        "import importlib",
        "__import__('os')",
        "exec('import os', {})",
        "exec('import socket')",
        "import os.path",
    ] {
        let r = run(code);
        let e = r
            .error()
            .unwrap_or_else(|| panic!("{code} was allowed: {r:?}"));
        assert_eq!(e.kind, "ImportError", "{code}");
        assert!(
            e.message.starts_with("import of '"),
            "{code}: {}",
            e.message
        );
        let allowed = ImportPolicy::DEFAULT_ALLOWED.join(", ");
        let wording = format!("is not allowed in this sandbox (allowed: {allowed})");
        assert!(e.message.contains(&wording), "{code}: {}", e.message);
    }
    assert_eq!(
        run("import os")
            .error()
            .unwrap()
            .message
            .split(" is ")
            .next(),
        Some("import of 'os'")
    );
}

#[test]
fn a_dotted_allow_allows_what_the_import_hands_over() {
    let allowing = |code: &str| run_allowing(code, &["os.path"]);
    for code in [
        "from os.path import join\njoin('a', 'b')",
        "__import__('os.path', fromlist=['join']).join('a', 'b')",
        "import collections.abc\n1",
    ] {
        let r = allowing(code);
        assert!(!r.is_failure(), "{code}: {r:?}");
    }
    for code in [
        "import os.path",
        "__import__('os.path')",
        "from os import path",
        "import os",
        "__import__('os.path', fromlist=[])",
    ] {
        let r = allowing(code);
        assert_eq!(
            r.error().map(|e| e.kind.as_str()),
            Some("ImportError"),
            "{code}: {r:?}"
        );
        assert!(
            r.error().unwrap().message.contains("import of 'os'"),
            "{code}: {r:?}"
        );
    }
}

#[test]
fn allowed_modules_import_what_they_need() {
    for (module, code, expected) in [
        (
            "json",
            "import json\njson.loads('[1, {\"a\": 2}]')",
            "[1, {'a': 2}]",
        ),
        (
            "csv",
            "import csv\nlist(csv.reader(['a,b', '1,2']))",
            "[['a', 'b'], ['1', '2']]",
        ),
        (
            "heapq",
            "import heapq\nheapq.nsmallest(2, [5, 1, 4])",
            "[1, 4]",
        ),
        (
            "decimal",
            "import decimal\ndecimal.Decimal('1.1') + decimal.Decimal('2.2')",
            "Decimal('3.3')",
        ),
        (
            "textwrap",
            "import textwrap\ntextwrap.shorten('hello there world', 12)",
            "'hello [...]'",
        ),
        (
            "fractions",
            "import fractions\nfractions.Fraction(3, 6)",
            "Fraction(1, 2)",
        ),
        (
            "dataclasses",
            "import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\nP(1)",
            "P(x=1)",
        ),
        (
            "pprint",
            "import pprint\npprint.pformat({'a': [1] * 3})",
            "\"{'a': [1, 1, 1]}\"",
        ),
    ] {
        let r = run_allowing(code, &[module]);
        assert_eq!(r.result(), Some(expected), "{module}: {r:?}");
    }
    // A native function called by the standard library fetching a module loaded already.
    assert_eq!(
        run_allowing("import json\njson.dumps([1, 'a'])", &["json"]).result(),
        Some("'[1, \"a\"]'")
    );
    // An import inside a stdlib function, made when it is called (singledispatch imports weakref).
    let r = run_allowing(
        "import functools\n@functools.singledispatch\ndef f(x):\n    return 'any'\nf(3)",
        &["functools"],
    );
    assert_eq!(r.result(), Some("'any'"), "{r:?}");
}

#[test]
fn no_driver_frame_lies_beneath_user_code() {
    let r = run_allowing(
        "import sys\ntry:\n    1/0\nexcept ZeroDivisionError as e:\n    f = e.__traceback__.tb_frame\n\
         (f.f_back, sys._getframe(0).f_back, getattr(open, '__globals__', None))",
        &["sys"],
    );
    assert_eq!(r.result(), Some("(None, None, None)"), "{r:?}");
}

#[test]
fn a_user_memory_error_is_an_exception_not_the_memory_limit() {
    for code in [
        "class MemoryError(Exception):\n    pass\nraise MemoryError('fake')",
        "raise MemoryError('by hand')",
    ] {
        let r = run(code);
        assert!(
            matches!(&r.outcome, Outcome::Raised(e) if e.kind == "MemoryError"),
            "{code}: {r:?}"
        );
    }
}

#[test]
fn os_urandom_past_the_wasi_cap_is_random_bytes() {
    let r = run("import random\nb = random._os.urandom(10**7)\n(len(b), len(set(b[:4096])) > 200)");
    assert_eq!(r.result(), Some("(10000000, True)"), "{r:?}");
}

#[test]
fn odd_module_names_are_import_errors() {
    for code in [
        "__import__('a' * 5000)",
        "__import__('a' * 10**5)",
        "__import__('collections.' + 'a' * 5000)",
        "__import__('math\\x00')",
        "__import__('\\udcff')",
        "__import__('')",
        "__import__('collections..abc')",
    ] {
        let r = run(code);
        assert_eq!(
            r.error().map(|e| e.kind.as_str()),
            Some("ImportError"),
            "{code}: {r:?}"
        );
    }
}

#[test]
fn relative_imports_are_refused() {
    let r = run("__package__ = 'collections'\nfrom . import abc");
    assert_eq!(r.error().unwrap().kind, "ImportError");
}

#[test]
fn extra_modules_can_be_allowed() {
    let r = run_allowing("import ast\nast.literal_eval('[1, 2]')", &["ast"]);
    assert_eq!(r.result(), Some("[1, 2]"), "{r:?}");
    assert_eq!(run("import ast").error().unwrap().kind, "ImportError");
}

#[test]
fn the_standard_librarys_own_imports_are_not_policed() {
    // statistics and random import modules (math, os, fractions...) that user code may not.
    assert_eq!(
        value("import statistics\nstatistics.fmean([1, 2, 4])").as_deref(),
        Some("2.3333333333333335")
    );
    assert_eq!(
        value("import random\nrandom.seed(1)\nrandom.randint(1, 10) in range(1, 11)").as_deref(),
        Some("True")
    );
}

/// A run given no files has no folders: every path fails, and the error says where files would be.
#[test]
fn file_access_without_files_fails_saying_where_files_live() {
    for code in [
        "open('/etc/passwd').read()",
        "open('notes.txt', 'w')",
        "open('/out/result.txt', 'w')",
        "import io\nio.open('/data/sales.csv')",
    ] {
        let r = run_allowing(code, &["io"]);
        let e = r.error().unwrap_or_else(|| panic!("{code}: {r:?}"));
        assert!(
            ["FileNotFoundError", "PermissionError"].contains(&e.kind.as_str()),
            "{code}: {e:?}"
        );
        assert!(
            e.message.contains(safe_python_protocol::NO_FILES_HERE),
            "{code}: {}",
            e.message
        );
        // The native `open` leaves no frame of its own in the traceback.
        assert!(!e.traceback.contains("<files>"), "{code}: {}", e.traceback);
    }
}

#[test]
fn unicode_round_trips() {
    let r = run("s = 'héllo ☃ 😀 \\u0000 日本'\nprint(s)\ns");
    assert_eq!(r.stdout, "héllo ☃ 😀 \u{0} 日本\n");
    assert_eq!(r.result(), Some("'héllo ☃ 😀 \\x00 日本'"));
    // A lone surrogate is a valid str, shown escaped, but cannot be printed as UTF-8: as in
    // CPython, `print` raises, and the report stays valid JSON.
    assert_eq!(value("s = '\\ud800'\ns").as_deref(), Some("'\\ud800'"));
    let r = run("print('\\ud800')");
    assert_eq!(
        r.error().map(|e| e.kind.as_str()),
        Some("UnicodeEncodeError"),
        "{r:?}"
    );
}

#[test]
fn random_is_reseeded_on_every_run() {
    let a = value("import random\nrandom.random()");
    let b = value("import random\nrandom.random()");
    assert_ne!(
        a, b,
        "two runs drew the same number: the snapshot's seed leaked"
    );
}

/// The guest's own `_random` (guest/src/random.rs) draws what CPython draws for a seed, through
/// every seeding path and method; the values are native CPython 3.11's.
#[test]
fn seeded_random_draws_what_cpython_draws() {
    let code = "import random
random.seed(42); a = random.random()
random.seed(-42); b = random.random()
random.seed(2**100 + 7); c = random.getrandbits(70)
random.seed('sandbox'); d = random.randint(0, 10**9)
random.seed(1.5); e = random.random()
r = random.Random(3); f = r.getstate()[1][:2] + r.getstate()[1][-1:]
random.seed(0); g = (random.getrandbits(0), random.getrandbits(1), random.getrandbits(33), random.getrandbits(64))
random.seed(9); s = random.getstate(); h1 = [random.random() for _ in range(3)]
random.setstate(s); h2 = [random.random() for _ in range(3)]
(a, b, c, d, e, f, g, h1 == h2, random.Random(7).sample(range(100), 3), random._random.Random(5).random())";
    assert_eq!(
        value(code).as_deref(),
        Some(
            "(0.6394267984578837, 0.6394267984578837, 370455104258706617356, 949766606, \
             0.551763726942059, (2147483648, 507801126, 624), (0, 1, 5949583294, \
             7758176404715800194), True, [41, 19, 50], 0.6229016948897019)"
        )
    );
    for (bad, kind) in [
        ("random.getrandbits(-1)", "ValueError"),
        ("random.setstate((3, (1, 2), None))", "ValueError"),
        (
            "random._random.Random().setstate((0,) * 624 + (625,))",
            "ValueError",
        ),
    ] {
        let r = run(&format!("import random\n{bad}"));
        assert_eq!(
            r.error().map(|e| e.kind.as_str()),
            Some(kind),
            "{bad}: {r:?}"
        );
    }
}

/// Unseeded generators, new or reseeded, draw from the host's entropy: no two runs agree.
#[test]
fn unseeded_random_generators_differ_between_runs() {
    let code = "import random
random.seed()
(random.random(), random.Random().random(), random.Random(None).getrandbits(64))";
    let (a, b) = (value(code).unwrap(), value(code).unwrap());
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split(", ").collect(), b.split(", ").collect());
    for (x, y) in a.iter().zip(&b) {
        assert_ne!(x, y, "two runs drew the same number");
    }
}

#[test]
fn runs_do_not_share_state() {
    assert_eq!(value("x = 41\nx").as_deref(), Some("41"));
    assert_eq!(run("x").error().unwrap().kind, "NameError");
    assert_eq!(
        value("import math\nmath.pi = 3\nmath.pi").as_deref(),
        Some("3")
    );
    assert_eq!(
        value("import math\nmath.pi").as_deref(),
        Some("3.141592653589793")
    );
}

#[test]
fn the_environment_is_empty() {
    let r = run_allowing("import os\nlen(os.environ), os.getcwd()", &["os"]);
    assert_eq!(
        r.result().map(|s| s.starts_with("(0, ")),
        Some(true),
        "{r:?}"
    );
}
