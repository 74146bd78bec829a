//! The value of the code's last statement: an expression's value, or what a final assignment
//! stored (`x = ...`, `a.count += 1`, `d['k'] *= 3`), as CPython-grounded tests and the seed
//! server report it.
//!
//! Worked out on the parser's own syntax tree, in Rust: the code is compiled as written, and only
//! when the last statement's value cannot be read back from a name is that statement rewritten to
//! leave it in a hidden one. Going through Python's `ast` objects instead cost about 60 k fuel per
//! syntax node, on every call.

use ruff_python_ast::name::Name;
use ruff_python_ast::{
    AtomicNodeIndex, Expr, ExprAttribute, ExprContext, ExprName, ExprSubscript, ModModule, Stmt,
    StmtAnnAssign, StmtAssign, StmtAugAssign,
};
use ruff_text_size::TextRange;
use rustpython::vm::builtins::PyDict;
use rustpython::vm::compiler::parser;
use rustpython::vm::{PyObjectRef, PyRef, VirtualMachine};

/// Hidden names the rewrite stores into; no Python source can spell them.
pub(crate) const RESULT: &str = "<result>";
const BASE: &str = "<base>";
const INDEX: &str = "<index>";
/// Every name the rewrite may leave in the namespace, to remove after the run.
pub(crate) const HIDDEN: [&str; 3] = [RESULT, BASE, INDEX];

/// How the value of the last statement is read once the code has run.
pub(crate) enum Reading {
    Nothing,
    /// The rewrite left it in the hidden name [`RESULT`].
    Hidden,
    /// `x = ...`: the global `x`.
    Name(String),
    /// `a, b = ...`: the globals `a` and `b`, as a tuple.
    Names(Vec<String>),
}

impl Reading {
    /// The value, from the namespace the code ran in.
    pub(crate) fn read(&self, globals: &PyRef<PyDict>, vm: &VirtualMachine) -> Option<PyObjectRef> {
        let get = |name: &str| globals.get_item_opt(name, vm).ok().flatten();
        match self {
            Reading::Nothing => None,
            Reading::Hidden => get(RESULT),
            Reading::Name(name) => get(name),
            Reading::Names(names) => Some(
                vm.ctx
                    .new_tuple(
                        names
                            .iter()
                            .map(|n| get(n).unwrap_or_else(|| vm.ctx.none()))
                            .collect(),
                    )
                    .into(),
            ),
        }
    }
}

/// What to compile and run for `source`.
pub(crate) enum Plan {
    /// The source as written.
    AsWritten(Reading),
    /// This module instead, whose last statements leave the value in [`RESULT`]. Each
    /// sub-expression of the original statement is still evaluated once, in CPython's order.
    Rewritten(ModModule),
}

/// The plan for `source`, which compiles (a source that does not parse gets no value).
pub(crate) fn plan(source: &str) -> Plan {
    let Ok(parsed) = parser::parse_module(source) else {
        return Plan::AsWritten(Reading::Nothing);
    };
    let mut module = parsed.into_syntax();
    let Some(last) = module.body.pop() else {
        return Plan::AsWritten(Reading::Nothing);
    };
    match rewrite(last) {
        Ok(replacement) => {
            module.body.extend(replacement);
            Plan::Rewritten(module)
        }
        Err(reading) => Plan::AsWritten(reading),
    }
}

/// The statements that replace `last`, or how to read its value when it stays as written.
fn rewrite(last: Stmt) -> Result<Vec<Stmt>, Reading> {
    match last {
        Stmt::Expr(stmt) => Ok(vec![assign(RESULT, *stmt.value, stmt.range)]),
        Stmt::Assign(mut stmt) => {
            let Some(first) = stmt.targets.first() else {
                return Err(Reading::Nothing);
            };
            if let Some(reading) = of_names(first) {
                return Err(reading);
            }
            // `a.x = v` / `a[i] = v`: evaluate `v` into the hidden name, then assign that.
            let at = stmt.range;
            let value = std::mem::replace(&mut *stmt.value, load(RESULT, at));
            Ok(vec![assign(RESULT, value, at), Stmt::Assign(stmt)])
        }
        Stmt::AnnAssign(mut stmt) => {
            let Some(value) = stmt.value.take() else {
                return Err(Reading::Nothing);
            };
            if let Some(reading) = of_names(&stmt.target) {
                return Err(reading);
            }
            let at = stmt.range;
            let stmt = StmtAnnAssign {
                value: Some(Box::new(load(RESULT, at))),
                ..stmt
            };
            Ok(vec![assign(RESULT, *value, at), Stmt::AnnAssign(stmt)])
        }
        Stmt::AugAssign(stmt) => match of_names(&stmt.target) {
            Some(reading) => Err(reading),
            None => rewrite_aug_assign(stmt),
        },
        _ => Err(Reading::Nothing),
    }
}

/// `base.attr op= v` becomes `<base> = base; <result> = <base>.attr; <result> op= v;
/// <base>.attr = <result>` (and likewise for `base[index]`): the same loads, calls and stores
/// as the original, in the same order, with the stored value left in `<result>`.
fn rewrite_aug_assign(stmt: StmtAugAssign) -> Result<Vec<Stmt>, Reading> {
    let at = stmt.range;
    let mut stmts = Vec::with_capacity(5);
    let (load_target, store_target) = match *stmt.target {
        Expr::Attribute(target) => {
            stmts.push(assign(BASE, *target.value, at));
            let node = |ctx| {
                Expr::Attribute(ExprAttribute {
                    node_index: AtomicNodeIndex::default(),
                    range: at,
                    value: Box::new(load(BASE, at)),
                    attr: target.attr.clone(),
                    ctx,
                })
            };
            (node(ExprContext::Load), node(ExprContext::Store))
        }
        // A slice is not an expression that can be stored: leave it alone.
        Expr::Subscript(target) if !target.slice.is_slice_expr() => {
            stmts.push(assign(BASE, *target.value, at));
            stmts.push(assign(INDEX, *target.slice, at));
            let node = |ctx| {
                Expr::Subscript(ExprSubscript {
                    node_index: AtomicNodeIndex::default(),
                    range: at,
                    value: Box::new(load(BASE, at)),
                    slice: Box::new(load(INDEX, at)),
                    ctx,
                })
            };
            (node(ExprContext::Load), node(ExprContext::Store))
        }
        _ => return Err(Reading::Nothing),
    };
    stmts.push(assign(RESULT, load_target, at));
    stmts.push(Stmt::AugAssign(StmtAugAssign {
        node_index: AtomicNodeIndex::default(),
        range: at,
        target: Box::new(name(RESULT, ExprContext::Store, at)),
        op: stmt.op,
        value: stmt.value,
    }));
    stmts.push(Stmt::Assign(StmtAssign {
        node_index: AtomicNodeIndex::default(),
        range: at,
        targets: vec![store_target],
        value: Box::new(load(RESULT, at)),
        runtime_targets: None,
        runtime_type_comment: None,
        runtime_type_comment_bytes: None,
    }));
    Ok(stmts)
}

/// A read for a target made of plain names, `None` for any other target.
fn of_names(target: &Expr) -> Option<Reading> {
    let id = |node: &Expr| match node {
        Expr::Name(n) => Some(n.id.to_string()),
        _ => None,
    };
    if let Some(name) = id(target) {
        return Some(Reading::Name(name));
    }
    let elts = match target {
        Expr::Tuple(t) => &t.elts,
        Expr::List(l) => &l.elts,
        _ => return None,
    };
    elts.iter()
        .map(id)
        .collect::<Option<Vec<_>>>()
        .map(Reading::Names)
}

fn name(id: &'static str, ctx: ExprContext, at: TextRange) -> Expr {
    Expr::Name(ExprName {
        node_index: AtomicNodeIndex::default(),
        range: at,
        id: Name::new_static(id),
        ctx,
    })
}

fn load(id: &'static str, at: TextRange) -> Expr {
    name(id, ExprContext::Load, at)
}

/// `id = value`, placed at `at`.
fn assign(id: &'static str, value: Expr, at: TextRange) -> Stmt {
    Stmt::Assign(StmtAssign {
        node_index: AtomicNodeIndex::default(),
        range: at,
        targets: vec![name(id, ExprContext::Store, at)],
        value: Box::new(value),
        runtime_targets: None,
        runtime_type_comment: None,
        runtime_type_comment_bytes: None,
    })
}
