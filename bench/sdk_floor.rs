//! `sdk-floor`: the least a program that reads a day must do with aws-sdk-s3, the floor of
//! `make bench-instructions` (bench/instructions.py, docs/performance.md).
//!
//! ```text
//! sdk-floor BUCKET PREFIX [CONCURRENCY (64)]
//! ```
//!
//! Lists `PREFIX` page by page, then GETs every listed object, `CONCURRENCY` in flight, and keeps
//! the bodies; prints `{"objects": N, "bytes": B}`. The SDK's defaults (retries, timeouts,
//! checksums, stalled-stream protection) on rustls over *ring*, the provider the job builds in;
//! path-style addressing for the local server. Nothing of the job's code.

use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use futures::StreamExt;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bucket, prefix, rest @ ..] = args.as_slice() else {
        panic!("usage: sdk-floor BUCKET PREFIX [CONCURRENCY]");
    };
    let concurrency: usize = rest.first().map_or(64, |c| c.parse().expect("CONCURRENCY"));
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let sdk =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).load().await;
    let conf = aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build();
    let s3 = aws_sdk_s3::Client::from_conf(conf);
    let mut keys = Vec::new();
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix(prefix).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.expect("ListObjectsV2");
        keys.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_string)));
    }
    let bodies: Vec<bytes::Bytes> = futures::stream::iter(&keys)
        .map(|k| {
            let s3 = &s3;
            async move {
                let out = s3.get_object().bucket(bucket).key(k).send().await.expect("GetObject");
                out.body.collect().await.expect("GetObject body").into_bytes()
            }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await;
    let bytes: usize = bodies.iter().map(|b| b.len()).sum();
    println!("{{\"objects\": {}, \"bytes\": {bytes}}}", bodies.len());
}
