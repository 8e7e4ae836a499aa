//! `#[tool]`: a `nexus-drive` tool from a plain `fn` or `async fn`. Use it
//! as `nexus_drive::tool` (feature `macros`); the crate docs of
//! `nexus-drive` describe what it generates.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::{parse_macro_input, Expr, FnArg, GenericArgument, ItemFn, Lit, Meta, Pat, PathArguments, ReturnType, Type};

/// Makes a tool of a function: the model calls it by the function's name,
/// reads its doc comment as the description, and gets an input schema
/// derived from its arguments (each argument a property, required unless it
/// is an `Option`). An argument of type `&ToolContext` or `ToolContext` is
/// the call's context, not a property. Documented arguments (`* \`name\` -
/// text` lines under a `# Arguments` heading) carry their text into the schema.
///
/// The function becomes a unit struct of the same name implementing `Tool`
/// (`fn`) or `AsyncTool` (`async fn`): register it with
/// `.tool(name)` / `.async_tool(name)`, and call the function itself as
/// `name::function(..)`.
///
/// It may return a value, `ToolOutcome<T>`, or a `Result` of either whose
/// error converts into `ToolError`. Options: `name = "..."` and
/// `description = "..."` replace the function's; `needs_approval` asks a
/// person before every call, `needs_approval = path` when `path(&Value) -> bool`
/// says so for the call's arguments.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| options.parse(meta));
    parse_macro_input!(attr with parser);
    let item = parse_macro_input!(item as ItemFn);
    match expand(options, item) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct Options {
    name: Option<String>,
    description: Option<String>,
    needs_approval: Option<Approval>,
}

enum Approval {
    Always,
    When(syn::Path),
}

impl Options {
    fn parse(&mut self, meta: syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
        if meta.path.is_ident("name") {
            self.name = Some(meta.value()?.parse::<syn::LitStr>()?.value());
        } else if meta.path.is_ident("description") {
            self.description = Some(meta.value()?.parse::<syn::LitStr>()?.value());
        } else if meta.path.is_ident("needs_approval") {
            self.needs_approval = Some(if meta.input.peek(syn::Token![=]) {
                Approval::When(meta.value()?.parse()?)
            } else {
                Approval::Always
            });
        } else {
            return Err(meta.error("expected `name`, `description` or `needs_approval`"));
        }
        Ok(())
    }
}

/// One argument of the function.
struct Arg {
    ident: syn::Ident,
    ty: Type,
    /// `&ToolContext` (true) or `ToolContext` (false): the call's context.
    context: Option<bool>,
}

fn expand(options: Options, item: ItemFn) -> syn::Result<Tokens> {
    let sig = &item.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(&sig.generics, "a #[tool] function cannot be generic"));
    }
    let is_async = sig.asyncness.is_some();
    let fn_name = &sig.ident;
    let name = options.name.clone().unwrap_or_else(|| fn_name.to_string());
    let (doc, arg_docs) = docs(&item.attrs);
    let description = match options.description.clone().or(doc) {
        Some(d) => d,
        None => {
            return Err(syn::Error::new_spanned(
                fn_name,
                "document the tool: its doc comment (or `description = \"...\"`) is what the model reads",
            ))
        }
    };

    let mut args = Vec::new();
    for input in &sig.inputs {
        let FnArg::Typed(pt) = input else {
            return Err(syn::Error::new_spanned(input, "a #[tool] is a free function, without `self`"));
        };
        let Pat::Ident(pi) = &*pt.pat else {
            return Err(syn::Error::new_spanned(&pt.pat, "a #[tool] argument must be a plain name"));
        };
        let context = context_kind(&pt.ty);
        if context.is_none() {
            if let Type::Reference(_) = &*pt.ty {
                return Err(syn::Error::new_spanned(
                    &pt.ty,
                    "a #[tool] argument is deserialized from the call: take it owned (String, not &str)",
                ));
            }
        }
        args.push(Arg { ident: pi.ident.clone(), ty: (*pt.ty).clone(), context });
    }

    let (output_ty, into_outcome) = output(&sig.output);
    let krate = quote!(::nexus_drive);
    let private = quote!(#krate::__private);
    let args_ty = format_ident!("__{}_Args", fn_name);
    let fields = args.iter().filter(|a| a.context.is_none()).map(|a| {
        let (ident, ty) = (&a.ident, &a.ty);
        let doc = arg_docs.iter().find(|(n, _)| ident == n).map(|(_, d)| d);
        let describe = doc.map(|d| quote!(#[schemars(description = #d)]));
        quote!(#describe pub #ident: #ty)
    });
    let field_names: Vec<&syn::Ident> = args.iter().filter(|a| a.context.is_none()).map(|a| &a.ident).collect();
    let call_args = args.iter().map(|a| {
        let ident = &a.ident;
        match (a.context, is_async) {
            (None, _) => quote!(#ident),
            (Some(true), false) => quote!(ctx),
            (Some(false), false) => quote!(::core::clone::Clone::clone(ctx)),
            (Some(true), true) => quote!(&ctx),
            (Some(false), true) => quote!(ctx),
        }
    });
    let needs_approval = options.needs_approval.as_ref().map(|a| {
        let policy = match a {
            Approval::Always => quote!(#krate::ApprovalPolicy::Always),
            Approval::When(path) => quote!(#krate::ApprovalPolicy::when(#path)),
        };
        quote!(fn needs_approval(&self) -> #krate::ApprovalPolicy { #policy })
    });

    let vis = &item.vis;
    // The doc comment documents the tool (the struct); every other attribute
    // (`allow`, `inline`, `cfg`…) was written for the function.
    let (attrs, fn_attrs): (Vec<&syn::Attribute>, Vec<&syn::Attribute>) =
        item.attrs.iter().partition(|a| a.path().is_ident("doc"));
    let block = &item.block;
    let mut function_sig = sig.clone();
    function_sig.ident = syn::Ident::new("function", Span::call_site());
    let unused_ctx = if args.iter().any(|a| a.context.is_some()) { quote!() } else { quote!(let _ = &ctx;) };

    // The two traits' `call` differ only in these: the trait, `async`, the
    // context by value or by reference, and awaiting the function.
    let (trait_name, asyncness, ctx_ty, awaited) = if is_async {
        (quote!(#krate::AsyncTool), quote!(async), quote!(#krate::ToolContext), quote!(.await))
    } else {
        (quote!(#krate::Tool), quote!(), quote!(&#krate::ToolContext), quote!())
    };
    let call = quote! {
        #asyncness fn call(
            &self,
            args: #args_ty,
            ctx: #ctx_ty,
        ) -> ::core::result::Result<#krate::ToolOutcome<#output_ty>, #krate::ToolError> {
            #unused_ctx
            let #args_ty { #(#field_names),* } = args;
            let returned = #fn_name::function(#(#call_args),*)#awaited;
            #into_outcome
        }
    };

    Ok(quote! {
        #(#attrs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, Default)]
        #vis struct #fn_name;

        impl #fn_name {
            /// The function as written.
            #(#fn_attrs)*
            #vis #function_sig #block
        }

        // Hidden, and without a doc comment: schemars would put one in the schema.
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
        #[serde(crate = "::nexus_drive::__private::serde")]
        #[schemars(crate = "::nexus_drive::__private::schemars")]
        #vis struct #args_ty {
            #(#fields),*
        }

        impl #trait_name for #fn_name {
            const NAME: &'static str = #name;
            type Args = #args_ty;
            type Output = #output_ty;

            fn description(&self) -> ::std::string::String {
                ::std::string::String::from(#description)
            }

            fn input_schema(&self) -> ::core::option::Option<#private::serde_json::Value> {
                ::core::option::Option::Some(#krate::tool::schema_for::<#args_ty>())
            }

            #needs_approval

            #call
        }
    })
}

/// `Some(true)` for `&ToolContext`, `Some(false)` for `ToolContext`.
fn context_kind(ty: &Type) -> Option<bool> {
    match ty {
        Type::Reference(r) => context_kind(&r.elem).filter(|by_ref| !by_ref).map(|_| true),
        Type::Path(p) => p.path.segments.last().filter(|s| s.ident == "ToolContext").map(|_| false),
        _ => None,
    }
}

/// The tool's `Output` type and the expression turning `returned` into
/// `Result<ToolOutcome<Output>, ToolError>`.
fn output(ret: &ReturnType) -> (Tokens, Tokens) {
    let outcome = quote!(::nexus_drive::ToolOutcome);
    let error = quote!(::nexus_drive::ToolError);
    let ty = match ret {
        ReturnType::Default => return (quote!(()), quote!(::core::result::Result::Ok(#outcome::Done(returned)))),
        ReturnType::Type(_, ty) => &**ty,
    };
    if let Some([ok, _err]) = generic_args(ty, "Result").as_deref() {
        return match generic_args(ok, "ToolOutcome").as_deref() {
            Some([inner]) => {
                (quote!(#inner), quote!(returned.map_err(|e| -> #error { ::core::convert::Into::into(e) })))
            }
            _ => (
                quote!(#ok),
                quote!(returned.map(#outcome::Done).map_err(|e| -> #error { ::core::convert::Into::into(e) })),
            ),
        };
    }
    match generic_args(ty, "ToolOutcome").as_deref() {
        Some([inner]) => (quote!(#inner), quote!(::core::result::Result::Ok(returned))),
        _ => (quote!(#ty), quote!(::core::result::Result::Ok(#outcome::Done(returned)))),
    }
}

/// The type arguments of `ty` when its last path segment is `name`.
fn generic_args(ty: &Type, name: &str) -> Option<Vec<Type>> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last().filter(|s| s.ident == name)?;
    let PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    Some(
        args.args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// The description (the doc comment up to a `# Arguments` heading) and the
/// arguments' own lines under it: `* \`name\` - text` (or `:` / `—`).
fn docs(attrs: &[syn::Attribute]) -> (Option<String>, Vec<(String, String)>) {
    let mut lines = Vec::new();
    for attr in attrs {
        if let Meta::NameValue(nv) = &attr.meta {
            if nv.path.is_ident("doc") {
                if let Expr::Lit(lit) = &nv.value {
                    if let Lit::Str(s) = &lit.lit {
                        let text = s.value();
                        lines.push(text.strip_prefix(' ').unwrap_or(&text).trim_end().to_string());
                    }
                }
            }
        }
    }
    let heading = lines.iter().position(|l| {
        let l = l.trim();
        let title = l.trim_start_matches('#').trim();
        l.starts_with('#') && (title.eq_ignore_ascii_case("arguments") || title.eq_ignore_ascii_case("parameters"))
    });
    let (description, rest) = match heading {
        Some(i) => (&lines[..i], &lines[i + 1..]),
        None => (&lines[..], &[][..]),
    };
    let description = description.join("\n").trim().to_string();
    let mut arg_docs = Vec::new();
    for line in rest {
        let line = line.trim().trim_start_matches(['*', '-']).trim_start();
        let Some(after) = line.strip_prefix('`') else { continue };
        let Some((name, text)) = after.split_once('`') else { continue };
        let text = text.trim_start().trim_start_matches(['-', ':', '—', '–']).trim();
        if !text.is_empty() {
            arg_docs.push((name.to_string(), text.to_string()));
        }
    }
    ((!description.is_empty()).then_some(description), arg_docs)
}
