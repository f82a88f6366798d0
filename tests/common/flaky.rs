//! A builder an operator has to fix: the Brief builder, except that a matter whose title starts
//! with "Poisoned" fails permanently while the flag is set (so it runs out of retries at once,
//! and a retry after clearing the flag lands its Brief).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use briefrail::builders::brief::BriefBuilder;
use briefrail::builders::{BuildContext, Builder};
use briefrail::ledger::Frame;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;

pub struct Flaky {
    pub poisoned: Arc<AtomicBool>,
}

impl Builder for Flaky {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            let (matter, _) = ctx.record().await?;
            if self.poisoned.load(Ordering::SeqCst)
                && matter.is_some_and(|m| m.title.starts_with("Poisoned"))
            {
                return Err(briefrail::Error::Build {
                    message: "model panel rejected the record: <b>bad</b> input".into(),
                    permanent: true,
                });
            }
            BriefBuilder.build(ctx).await
        }
        .boxed_local()
    }
}
