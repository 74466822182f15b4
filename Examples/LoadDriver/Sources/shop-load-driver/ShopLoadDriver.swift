import StoreKitLoadKit

/// `sksim load --driver .build/debug/shop-load-driver`: the shop's users and app on every device.
@main struct ShopLoadDriver {
    static func main() async {
        await LoadDriverProgram.main(behavior: ShopUsers(), app: ShopObserver.simulatedApp())
    }
}
