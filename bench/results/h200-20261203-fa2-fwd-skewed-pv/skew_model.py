# Model of the skewed loop's arithmetic (one row block), against exact softmax attention.
import numpy as np
rng=np.random.default_rng(1)
def run(nq,nk,d,bn,causal,scale_boost):
    q=rng.uniform(-1,1,(nq,d))*scale_boost; k=rng.uniform(-1,1,(nk,d)); v=rng.uniform(-1,1,(nk,d))
    mult=np.log2(np.e)/np.sqrt(d)
    s_all=q@k.T
    if causal:
        mask=np.arange(nk)[None,:] <= (np.arange(nq)[:,None]+nk-nq)
        s_all=np.where(mask,s_all,-np.inf)
    ref=np.exp((s_all-s_all.max(1,keepdims=True))/np.sqrt(d)); ref=ref/ref.sum(1,keepdims=True)@v
    nb=(nk+bn-1)//bn
    o=np.zeros((nq,d)); mx=np.full(nq,-np.inf); sm=np.zeros(nq); p_prev=None; v_prev=None
    for n in range(nb-1,-1,-1):          # last block first
        s=s_all[:,n*bn:(n+1)*bn]
        tmax=s.max(1)*mult
        grow=(tmax-mx>8.0)               # NaN compares false
        rescale=grow.any()               # one warp = the whole block here
        new=np.where(rescale,np.maximum(mx,tmax),mx)
        with np.errstate(invalid='ignore'):
            fac=np.where(new==-np.inf,1.0,np.exp2(mx-new))
        mx=new; sm=sm*fac
        if p_prev is not None: o=o+p_prev@v_prev          # P V of the block before, old scale
        base=np.where(mx==-np.inf,0.0,mx)
        p=np.exp2(s*mult-base[:,None]); sm=sm+p.sum(1)
        p=p.astype(np.float16).astype(np.float64)          # 16-bit P
        if rescale: o=o*fac[:,None]
        p_prev=p; v_prev=v[n*bn:(n+1)*bn]
    o=o+p_prev@v_prev
    out=np.where(sm[:,None]>0,o/np.where(sm>0,sm,1)[:,None],0)
    return np.abs(out-ref).max(), (p_prev.max())
for args in [(128,512,64,64,False,1),(128,512,64,64,True,1),(128,700,64,64,True,4),(64,64,64,64,True,8),(128,1000,64,64,False,6)]:
    print(args, run(*args))
